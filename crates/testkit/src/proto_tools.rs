//! The tools that hold the protobuf API to its contract (`proto/`, architecture.md §11): `buf`
//! (lint, breaking-change check, generation) and `protoc-gen-doc` (the reference in `docs/api.md`),
//! both built from their Go modules into `~/.cache/verge/proto-tools/` (or
//! `$VERGE_PROTO_TOOLS_CACHE`) once, like the control plane; and the API's baseline: the `proto/`
//! tree of the previous release tag, or of the first commit that has
//! `proto/verge/message/v1/message.proto` while no release is tagged.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Instant;

use anyhow::{Context as _, bail};

use crate::go_build::go_path;
use crate::lock::FileLock;

/// The pinned buf release (`github.com/bufbuild/buf`).
pub const BUF_VERSION: &str = "1.75.0";
/// The pinned protoc-gen-doc release (`github.com/pseudomuto/protoc-gen-doc`).
pub const PROTOC_GEN_DOC_VERSION: &str = "1.5.1";
/// The file whose first commit is the API's baseline while no release tag exists.
pub const FIRST_API_FILE: &str = "proto/verge/message/v1/message.proto";

/// Where the tools are built and cached.
#[derive(Debug, Clone)]
pub struct ProtoTools {
    /// The cache directory; the binaries are in its `bin/`.
    pub cache_dir: PathBuf,
}

impl ProtoTools {
    /// `$VERGE_PROTO_TOOLS_CACHE`, else `~/.cache/verge/proto-tools`.
    pub fn from_env() -> Self {
        let cache_dir = std::env::var_os("VERGE_PROTO_TOOLS_CACHE")
            .filter(|p| !p.is_empty())
            .map_or_else(
                || crate::paths::verge_home().join("proto-tools"),
                PathBuf::from,
            );
        Self { cache_dir }
    }

    /// The `buf` binary.
    pub fn buf(&self) -> PathBuf {
        self.cache_dir.join("bin/buf")
    }

    /// The `protoc-gen-doc` binary.
    pub fn protoc_gen_doc(&self) -> PathBuf {
        self.cache_dir.join("bin/protoc-gen-doc")
    }

    fn stamp(&self) -> String {
        format!("buf v{BUF_VERSION} protoc-gen-doc v{PROTOC_GEN_DOC_VERSION}")
    }

    /// Whether the cache holds both binaries of the pinned versions (its `complete` stamp
    /// names them).
    pub fn is_built(&self) -> bool {
        let stamp = std::fs::read_to_string(self.cache_dir.join("complete")).unwrap_or_default();
        stamp.trim() == self.stamp() && self.buf().is_file() && self.protoc_gen_doc().is_file()
    }

    /// Builds both tools unless [`ProtoTools::is_built`] (`assets/proto-tools/build.sh`:
    /// `go install` from the Go module proxy; about 3 minutes with cold Go caches on 2
    /// cores, a progress line at least every 10 s). Serialized across processes by
    /// `<cache-dir>.lock`. Blocks.
    ///
    /// # Errors
    /// `go` is missing, or the build fails.
    pub fn ensure_built(&self) -> anyhow::Result<()> {
        if self.is_built() {
            return Ok(());
        }
        let mut lock_name = self.cache_dir.clone().into_os_string();
        lock_name.push(".lock");
        if let Some(parent) = self.cache_dir.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        let _lock = FileLock::acquire(&PathBuf::from(lock_name))?;
        if self.is_built() {
            return Ok(());
        }
        let path = go_path("building buf and protoc-gen-doc")?;
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/proto-tools/build.sh");
        eprintln!(
            "verge-testkit: building buf v{BUF_VERSION} and protoc-gen-doc v{PROTOC_GEN_DOC_VERSION} into {} (~3 min with cold Go caches, once)",
            self.cache_dir.display()
        );
        let started = Instant::now();
        crate::go_build::Script {
            path: &script,
            args: &[
                self.cache_dir.as_os_str(),
                BUF_VERSION.as_ref(),
                PROTOC_GEN_DOC_VERSION.as_ref(),
            ],
            env: &[],
            low_priority: false,
        }
        .run(&path)?;
        if !self.is_built() {
            bail!("{} finished but the binaries are missing", script.display());
        }
        eprintln!(
            "verge-testkit: buf and protoc-gen-doc built in {:.0?}",
            started.elapsed()
        );
        Ok(())
    }

    /// Runs `buf <args>` in `dir` (a buf module: `proto/` or a copy of it), capturing its
    /// output. The caller reads the status: buf exits 100 for lint findings and breaking
    /// changes.
    ///
    /// # Errors
    /// buf cannot be started.
    pub fn run_buf(&self, dir: &Path, args: &[&str]) -> anyhow::Result<Output> {
        Command::new(self.buf())
            .args(args)
            .current_dir(dir)
            .env("BUF_CACHE_DIR", self.cache_dir.join("buf-cache"))
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {} {}", self.buf().display(), args.join(" ")))
    }

    /// `buf breaking` of the module in `dir` against the module in `against` (the rules of
    /// `dir`'s `buf.yaml`). `Ok(Err(findings))` when buf reports breaking changes.
    ///
    /// # Errors
    /// buf cannot be started, or fails for another reason than a finding.
    pub fn breaking(&self, dir: &Path, against: &Path) -> anyhow::Result<Result<(), String>> {
        let against = against
            .to_str()
            .context("the baseline path is not UTF-8")?
            .to_owned();
        let output = self.run_buf(dir, &["breaking", "--against", &against])?;
        findings(&output, "buf breaking")
    }

    /// `buf lint` of the module in `dir`. `Ok(Err(findings))` when buf reports findings.
    ///
    /// # Errors
    /// buf cannot be started, or fails for another reason than a finding.
    pub fn lint(&self, dir: &Path) -> anyhow::Result<Result<(), String>> {
        let output = self.run_buf(dir, &["lint"])?;
        findings(&output, "buf lint")
    }
}

/// Exit 0: no findings; exit 100 (buf's "file annotations"): the findings it printed;
/// anything else is an error.
fn findings(output: &Output, what: &str) -> anyhow::Result<Result<(), String>> {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    match output.status.code() {
        Some(0) => Ok(Ok(())),
        Some(100) => Ok(Err(text.trim().to_owned())),
        _ => bail!("{what} failed ({}): {}", output.status, text.trim()),
    }
}

/// The API baseline of a repository: which commit it is and where its `proto/` tree was
/// extracted.
#[derive(Debug)]
pub struct Baseline {
    /// The tag (`v*`) or commit the tree comes from.
    pub reference: String,
    /// The extracted `proto/` directory (inside `TempDir`).
    pub proto_dir: PathBuf,
    _dir: tempfile::TempDir,
}

/// Extracts the API baseline of the repository at `repo`: the newest tag `v*` reachable
/// from `HEAD` (the previous release), else the first commit that added
/// [`FIRST_API_FILE`] (`git archive <ref> proto`, extracted with `tar` into a temporary
/// directory).
///
/// # Errors
/// `git` fails (e.g. a shallow clone without that commit) or the archive cannot be
/// extracted.
pub fn baseline(repo: &Path) -> anyhow::Result<Baseline> {
    let git = |args: &[&str]| -> anyhow::Result<String> {
        let out = Command::new("git")
            .args(args)
            .current_dir(repo)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running git {}", args.join(" ")))?;
        if !out.status.success() {
            bail!(
                "git {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let tag = git(&["describe", "--tags", "--abbrev=0", "--match", "v[0-9]*"]).ok();
    let reference = match tag.filter(|t| !t.is_empty()) {
        Some(tag) => tag,
        None => {
            let log = git(&[
                "log",
                "--diff-filter=A",
                "--format=%H",
                "--",
                FIRST_API_FILE,
            ])?;
            log.lines().last().map(str::to_owned).with_context(|| {
                format!(
                    "no release tag and no commit adding {FIRST_API_FILE} in {} (a shallow clone?)",
                    repo.display()
                )
            })?
        }
    };
    let dir = tempfile::tempdir().context("creating a directory for the API baseline")?;
    let tar = dir.path().join("proto.tar");
    let tar_arg = tar
        .to_str()
        .context("the temporary directory is not UTF-8")?;
    git(&[
        "archive",
        "--format=tar",
        "--output",
        tar_arg,
        &reference,
        "proto",
    ])?;
    let status = Command::new("tar")
        .arg("-xf")
        .arg(&tar)
        .current_dir(dir.path())
        .status()
        .context("running tar")?;
    if !status.success() {
        bail!("extracting proto/ of {reference} failed: tar {status}");
    }
    Ok(Baseline {
        reference,
        proto_dir: dir.path().join("proto"),
        _dir: dir,
    })
}

impl ProtoTools {
    /// The API reference generated from the module in `proto_dir` (`buf generate` with
    /// protoc-gen-doc and the module's `api.md.tmpl`, all files in one document): the text
    /// `docs/api.md` must hold.
    ///
    /// # Errors
    /// buf or the plugin fails (e.g. a template error), or the output cannot be read.
    pub fn api_docs(&self, proto_dir: &Path) -> anyhow::Result<String> {
        let dir = tempfile::tempdir().context("creating a directory for buf generate")?;
        let template = proto_dir.join("api.md.tmpl");
        let template = template
            .canonicalize()
            .with_context(|| format!("finding {}", template.display()))?;
        let out = dir.path().join("out");
        let config = dir.path().join("buf.gen.yaml");
        // JSON is YAML: no quoting rules to get wrong for the paths.
        let plugin = serde_json::json!({
            "version": "v2",
            "plugins": [{
                "local": self.protoc_gen_doc(),
                "out": out,
                "strategy": "all",
                "opt": format!("{},api.md", template.display()),
            }],
        });
        std::fs::write(&config, plugin.to_string())
            .with_context(|| format!("writing {}", config.display()))?;
        let config = config.to_str().context("temporary path is not UTF-8")?;
        let output = self.run_buf(proto_dir, &["generate", "--template", config])?;
        if !output.status.success() {
            bail!(
                "buf generate (protoc-gen-doc) failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        let file = out.join("api.md");
        std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))
    }
}
