/* The pod sandbox ("pause") process of the Verge test kit's kubelet node: holds the pod's
 * namespaces, reaps orphaned children (it is PID 1 of the pod when the PID namespace is shared)
 * and exits on SIGINT/SIGTERM. Compiled with `gcc -static`; the image holds only this binary.
 * Written for Verge; no registry is reachable, so the upstream image cannot be pulled. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig) { _exit(128 + sig); }

static void on_child(int sig) {
  (void)sig;
  while (waitpid(-1, 0, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction stop = {0}, child = {0};
  stop.sa_handler = on_stop;
  child.sa_handler = on_child;
  child.sa_flags = SA_NOCLDSTOP | SA_RESTART;
  if (sigaction(SIGINT, &stop, 0) || sigaction(SIGTERM, &stop, 0) ||
      sigaction(SIGCHLD, &child, 0)) {
    return 1;
  }
  for (;;) {
    pause();
  }
}
