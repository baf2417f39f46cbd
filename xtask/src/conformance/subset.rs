//! The CI subset (`cargo xtask conformance --subset`, run by `cargo xtask test`): a few specs
//! of each area and of each package of the conformance suite (`test/e2e/{apps,auth,common,
//! network,node,scheduling,storage}`), chosen among the quick ones (a few seconds each, one
//! liveness restart, the longest about 25 s), so the run takes minutes while every area edged
//! and the edge network implement is exercised by Kubernetes' own specs. The full selections
//! stay `cargo xtask conformance --suite <suite>`.

/// The specs, each a unique part of its text (after its `[sig-...] `), grouped by area; the
/// last groups by package of the conformance suite.
pub const SPECS: &[&str] = &[
    // Pods: updates, deadlines, readiness gates, service links, exec and logs through the API
    // server.
    "Pods should be updated [",
    "Pods should allow activeDeadlineSeconds to be updated [",
    "Pods should support pod readiness gates [",
    "Pods should contain environment variables for services [",
    "Pods should support remote command execution over websockets [",
    "Pods should support retrieving logs from the container over websockets [",
    // Lifecycle hooks (exec, http, https from a sidecar, sleep).
    "Container Lifecycle Hook when create a pod with lifecycle hook should execute poststart \
     exec hook properly [",
    "Container Lifecycle Hook when create a pod with lifecycle hook should execute prestop \
     http hook properly [",
    "Restartable Init Container Lifecycle Hook when create a pod with lifecycle hook should \
     execute prestop https hook properly [",
    "Lifecycle Sleep Hook when create a pod with lifecycle hook using sleep action valid \
     prestop hook using sleep action [",
    // Probes.
    "Probing container should be restarted with a /healthz http liveness probe [",
    // Init containers and restart rules.
    "InitContainer should invoke init containers on a RestartNever pod [",
    "InitContainer should not start app containers and fail the pod if init containers fail \
     on a RestartNever pod [",
    "Container Restart Rules should restart container on rule match [",
    // Environment.
    "ConfigMap should be consumable via the environment [",
    "Variable Expansion should allow composing env vars into new env vars [",
    "Downward API should provide pod name, namespace and IP address as env vars [",
    // Volumes.
    "ConfigMap should be consumable from pods in volume with mappings [",
    "Secrets should be consumable from pods in volume with defaultMode set [",
    "Projected combined should project all components that make up the projection API [",
    "Downward API volume should update labels on modification [",
    "EmptyDir volumes should support (root,0666,tmpfs) [",
    "HostPath should give a volume the correct mode [",
    // Security context, sysctls, admission.
    "Security Context When creating a container with runAsUser should run the container with \
     uid 65534 [",
    "Security Context When creating a pod with readOnlyRootFilesystem should run the container \
     with readonly rootfs when readOnlyRootFilesystem=true [",
    "Security Context When creating a container with runAsNonRoot should not run with an \
     explicit root user ID [",
    "Sysctls [LinuxOnly] should support sysctls [",
    "Sysctls [LinuxOnly] should not launch unsafe, but not explicitly enabled sysctls on the \
     node [",
    "PodOSRejection Kubelet [LinuxOnly] should reject pod when the node OS doesn't match pod's \
     OS [",
    // Ephemeral containers, /etc/hosts and hostname, termination messages.
    "Ephemeral Containers will start an ephemeral container in an existing pod [",
    "Kubelet when scheduling an agnhost Pod with hostAliases should write entries to \
     /etc/hosts [",
    "Override hostname of Pod a pod has hostnameOverride field with value that is a valid DNS \
     subdomain.",
    "Container Runtime blackbox test on terminated container should report termination \
     message if TerminationMessagePath is set [",
    // Networking: pod IPs, Services (TCP and UDP on one port, node ports, session affinity),
    // cluster DNS (A, SRV, PTR, CNAME; BIND's dig and glibc's resolver).
    "Networking Granular Checks: Pods should function for intra-pod communication: udp [",
    "Networking Granular Checks: Pods should function for node-pod communication: http [",
    "Services should serve a basic endpoint from pods [",
    "Services should serve endpoints on same port and different protocols [",
    "Services should be able to create a functioning NodePort service [",
    "Services should have session affinity work for service with type clusterIP [",
    "DNS should provide DNS for services [",
    "DNS should provide DNS for ExternalName services [",
    // test/e2e/common, 1.37 kubelet behaviour: the relaxed env var names, in-place resize,
    // image volumes (pull policy Always with no registry reachable: the node's image).
    "ConfigMap should be consumable as environment variable names with various prefixes [",
    "Pod InPlace Resize Container resize pod via the replace endpoint [",
    "ImageVolume should succeed with pod and pull policy of Always [",
    // test/e2e/apps: controllers' pods on the edge node (ReplicaSet, Job restarts, a rolling
    // update from one agnhost image to another).
    "ReplicaSet should serve a basic image on each replica with a public image [",
    "Job should run a job to completion when tasks sometimes fail and are locally restarted [",
    "Deployment RollingUpdateDeployment should delete old pods and create new ones [",
    // A pod whose host port is taken is rejected as Failed, and its StatefulSet makes it anew.
    "StatefulSet Basic StatefulSet functionality [StatefulSetBasic] Should recreate evicted \
     statefulset [",
    // test/e2e/auth: projected service-account tokens, ClusterTrustBundles and pod
    // certificates (issued by the spec's own signer through edgecontroller).
    "ServiceAccounts should mount projected service account token [",
    "should be able to mount a single ClusterTrustBundle by name [",
    "should allow server and client pods to establish an mTLS connection [",
    // test/e2e/node: preStop through a Service, pod-level run-as user and group, pod
    // generation and observedGeneration.
    "PreStop should call prestop when killing a pod [",
    "Pod Generation pod generation should start at 1 and increment per update [",
    "Security Context should support pod.Spec.SecurityContext.RunAsUser And \
     pod.Spec.SecurityContext.RunAsGroup [",
    // test/e2e/scheduling: LimitRange defaults on an edge pod.
    "LimitRange should create a LimitRange with defaults and ensure pod has those defaults \
     applied. [",
    // test/e2e/storage: many configmap volumes at once, subPath of an atomic writer volume.
    "EmptyDir wrapper volumes should not conflict [",
    "Subpath Atomic writer volumes should support subpaths with configmap pod [",
];

/// `--ginkgo.focus` of the subset: the [`SPECS`], regex-quoted, joined by `|`.
pub fn focus() -> String {
    SPECS
        .iter()
        .map(|s| regex::escape(s))
        .collect::<Vec<_>>()
        .join("|")
}
