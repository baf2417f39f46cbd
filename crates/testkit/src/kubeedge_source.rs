//! KubeEdge's own release source, for tests that check Verge against what KubeEdge publishes
//! (its CRDs and sample manifests): module `github.com/kubeedge/kubeedge` at [`VERSION`],
//! fetched from the Go module proxy by `go mod download` into the user's module cache (read
//! only, shared by every run; about 17 MB once). Read at test time, never copied into this
//! repository.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context as _, bail};

/// The KubeEdge release Verge's `apps.kubeedge.io` and `operations.kubeedge.io` schemas
/// follow.
pub const VERSION: &str = "v1.23.0";

/// The module's directory in the Go module cache (downloading it when missing), e.g.
/// `~/go/pkg/mod/github.com/kubeedge/kubeedge@v1.23.0`; `build/crds/` holds its CRDs.
///
/// # Errors
/// No Go, the proxy cannot be reached, or `go` answers without a directory.
pub fn source_dir() -> anyhow::Result<PathBuf> {
    let path = crate::go_build::go_path("KubeEdge's release source")?;
    let module = format!("github.com/kubeedge/kubeedge@{VERSION}");
    let output = Command::new("go")
        .args(["mod", "download", "-json", &module])
        .env("PATH", path)
        // Outside any module: `go mod download` of an exact version needs none.
        .current_dir(std::env::temp_dir())
        .output()
        .with_context(|| format!("running go mod download {module}"))?;
    if !output.status.success() {
        bail!(
            "go mod download {module} failed ({}): {}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let answer: serde_json::Value = serde_json::from_slice(&output.stdout)
        .with_context(|| format!("reading go mod download's answer for {module}"))?;
    let dir = answer["Dir"]
        .as_str()
        .with_context(|| format!("go mod download named no directory for {module}: {answer}"))?;
    Ok(PathBuf::from(dir))
}
