//! The third-party controllers of `examples/`, built the way a third party builds them: the
//! Go controller (`examples/go-controller`, code generated with protoc-gen-go and
//! protoc-gen-go-grpc) and the Python controller (`examples/python-controller`, code
//! generated with grpcio-tools from PyPI into a venv). Each `build.sh` runs into
//! `~/.cache/verge/examples/<name>/<hash of the inputs>/` (inputs: the example's files and
//! the `.proto` files of `verge.message.v1` and `verge.hub.v1`), so a change to any of them
//! builds anew and an unchanged tree reuses the build. Nothing generated is written into the
//! repository.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context as _, bail};

use crate::lock::FileLock;

/// The `.proto` files the controllers are generated from, relative to `proto/`.
pub const PROTO_FILES: [&str; 3] = [
    "verge/message/v1/message.proto",
    "verge/hub/v1/join.proto",
    "verge/hub/v1/hub.proto",
];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// SHA-256 (first 16 hex digits) over `files` (by name, length and content, in the order
/// given).
///
/// # Errors
/// A file cannot be read.
pub fn hash_files(files: &[PathBuf]) -> anyhow::Result<String> {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for file in files {
        let name = file.file_name().map(|n| n.to_string_lossy().into_owned());
        let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
        ctx.update(name.unwrap_or_default().as_bytes());
        ctx.update(&(bytes.len() as u64).to_le_bytes());
        ctx.update(&bytes);
    }
    Ok(ctx
        .finish()
        .as_ref()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// Every regular file directly in `dir`, sorted, followed by `extra`.
///
/// # Errors
/// `dir` cannot be read.
pub fn inputs(dir: &Path, extra: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files.extend_from_slice(extra);
    Ok(files)
}

/// An example controller of `examples/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Example {
    /// `examples/go-controller`.
    Go,
    /// `examples/python-controller`.
    Python,
}

impl Example {
    fn name(self) -> &'static str {
        match self {
            Self::Go => "go-controller",
            Self::Python => "python-controller",
        }
    }

    /// The example's source directory.
    pub fn source_dir(self) -> PathBuf {
        repo_root().join("examples").join(self.name())
    }

    /// Builds the example unless the cache holds a build of the current inputs, and returns
    /// the command that runs it (program and leading arguments). The Go build needs `go`
    /// (and the Go module proxy), about 1–3 minutes with cold Go caches; the Python build
    /// needs `python3` with `venv` (and PyPI), about a minute cold. Progress goes to stderr;
    /// builds are serialized across processes by `<cache>/build.lock`.
    ///
    /// # Errors
    /// A tool is missing or `build.sh` fails.
    pub fn ensure_built(self) -> anyhow::Result<Vec<PathBuf>> {
        let source = self.source_dir();
        let protos: Vec<PathBuf> = PROTO_FILES
            .iter()
            .map(|f| repo_root().join("proto").join(f))
            .collect();
        let root = crate::paths::verge_home()
            .join("examples")
            .join(self.name());
        let dir = root.join(hash_files(&inputs(&source, &protos)?)?);
        let command = self.command(&dir);
        let script = source.join("build.sh");
        let what = format!("examples/{}", self.name());
        cached_build(&root, &dir, &command, &what, || match self {
            Self::Go => crate::go_mapper::run_protoc_script(
                &script,
                &dir,
                ("GO_CONTROLLER_TOOLS", &root.join("tools")),
                "building the Go example controller",
            ),
            Self::Python => {
                let status = std::process::Command::new("bash")
                    .arg(&script)
                    .arg(&dir)
                    .stdin(std::process::Stdio::null())
                    .stdout(std::io::stderr())
                    .status()
                    .with_context(|| format!("running {}", script.display()))?;
                if !status.success() {
                    bail!("{} {} failed: {status}", script.display(), dir.display());
                }
                Ok(())
            }
        })?;
        Ok(command)
    }

    /// The program and leading arguments of a build in `dir`.
    fn command(self, dir: &Path) -> Vec<PathBuf> {
        match self {
            Self::Go => vec![dir.join("bin/go-controller")],
            Self::Python => vec![dir.join("venv/bin/python"), dir.join("controller.py")],
        }
    }
}

/// Runs `build` for a build into `dir` (under `root`) unless `dir/complete` exists with
/// every one of `products`; serialized across processes by `<root>/build.lock`; writes the
/// stamp after a build that made every product. `what` names it in the progress lines.
///
/// # Errors
/// `build` fails, or a product is missing after it.
pub fn cached_build(
    root: &Path,
    dir: &Path,
    products: &[PathBuf],
    what: &str,
    build: impl FnOnce() -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let stamp = dir.join("complete");
    let built = || stamp.is_file() && products.iter().all(|p| p.is_file());
    if built() {
        return Ok(());
    }
    std::fs::create_dir_all(root).with_context(|| format!("creating {}", root.display()))?;
    let _lock = FileLock::acquire(&root.join("build.lock"))?;
    if built() {
        return Ok(());
    }
    eprintln!("verge-testkit: building {what} into {}", dir.display());
    let started = Instant::now();
    build()?;
    if !products.iter().all(|p| p.is_file()) {
        bail!("building {what} finished but {products:?} is missing");
    }
    std::fs::write(&stamp, "complete\n").with_context(|| format!("writing {}", stamp.display()))?;
    eprintln!("verge-testkit: {what} built in {:.0?}", started.elapsed());
    Ok(())
}

/// What an example controller needs to attach, as files: the Verge CA and a ControllerHub
/// token, in a temporary directory removed on drop.
#[derive(Debug)]
pub struct Access {
    dir: tempfile::TempDir,
}

impl Access {
    /// Writes `ca_pem` and `token` into a new temporary directory.
    ///
    /// # Errors
    /// The directory or a file cannot be written.
    pub fn write(ca_pem: &str, token: &str) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir().context("creating a directory for the controller")?;
        std::fs::write(dir.path().join("ca.pem"), ca_pem)?;
        std::fs::write(dir.path().join("token"), token)?;
        Ok(Self { dir })
    }

    /// The arguments every example controller takes: `--cloudhub <url> --ca-file ...
    /// --token-file ... --group <group> --node <node>` (the command's id and content follow).
    pub fn args(&self, cloudhub: &str, group: &str, node: &str) -> Vec<String> {
        let file = |name: &str| self.dir.path().join(name).display().to_string();
        [
            "--cloudhub",
            cloudhub,
            "--ca-file",
            &file("ca.pem"),
            "--token-file",
            &file("token"),
            "--group",
            group,
            "--node",
            node,
        ]
        .map(str::to_owned)
        .to_vec()
    }
}
