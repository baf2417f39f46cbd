//! Work `cargo xtask test` runs beside its foreground steps, so a cold run on two cores
//! fills the time the tests spend waiting (for pods, for Kubernetes, for a partition to
//! heal) with the builds it needs later: [`Background`] is one thread running a list of
//! steps in order, optionally at the lowest CPU priority (`nice 19`, which the processes it
//! starts inherit), so the foreground always comes first.

use std::thread::JoinHandle;
use std::time::Instant;

use anyhow::Context as _;

/// One background step: a name for the progress lines and the blocking work.
pub type Step = (&'static str, Box<dyn FnOnce() -> anyhow::Result<()> + Send>);

/// A thread running [`Step`]s in order; stops at the first failing step.
pub struct Background {
    what: &'static str,
    handle: JoinHandle<anyhow::Result<()>>,
}

impl Background {
    /// Starts `steps` on a new thread named `what`; with `low_priority` the thread (and every
    /// process it starts) runs at nice 19. Each step's start and duration are printed as
    /// `xtask test: [background <what>] ...`.
    ///
    /// # Errors
    /// The thread cannot be spawned.
    pub fn spawn(what: &'static str, low_priority: bool, steps: Vec<Step>) -> anyhow::Result<Self> {
        let handle = std::thread::Builder::new()
            .name(what.to_owned())
            .spawn(move || {
                if low_priority {
                    lower_priority(what);
                }
                for (step, work) in steps {
                    eprintln!("xtask test: [background {what}] {step}");
                    let started = Instant::now();
                    work().with_context(|| format!("{what}: {step}"))?;
                    eprintln!(
                        "xtask test: [background {what}] {step} done in {:.0?}",
                        started.elapsed()
                    );
                }
                Ok(())
            })
            .with_context(|| format!("spawning the {what} thread"))?;
        Ok(Self { what, handle })
    }

    /// Waits for every step; the first step's error, if one failed.
    ///
    /// # Errors
    /// A step failed or panicked.
    pub fn join(self) -> anyhow::Result<()> {
        match self.handle.join() {
            Ok(result) => result,
            Err(_) => anyhow::bail!("the {} thread panicked", self.what),
        }
    }
}

/// Sets this thread's nice value to 19 (Linux applies `setpriority(PRIO_PROCESS, tid)` to
/// the one thread; children inherit it). A failure only costs speed, so it is printed.
fn lower_priority(what: &str) {
    let tid = rustix::thread::gettid();
    if let Err(e) = rustix::process::setpriority_process(Some(tid), 19) {
        eprintln!("xtask test: [background {what}] cannot lower its priority: {e}");
    }
}
