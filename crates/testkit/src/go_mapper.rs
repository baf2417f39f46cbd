//! The Go virtual mapper (`mappers/go-virtual`), built from Verge's DMI `.proto` with
//! protoc-gen-go and protoc-gen-go-grpc: the proof that a third party integrates through the
//! protobuf API alone.
//!
//! [`ensure_built`] runs `mappers/go-virtual/build.sh` into
//! `~/.cache/verge/go-mapper/<hash of the inputs>/` (inputs: the Go sources, `go.mod`,
//! `go.sum`, `build.sh` with the pinned generator versions, and `api.proto`), so a change to
//! any of them builds anew and an unchanged tree reuses the binary. The generators are
//! installed once into `~/.cache/verge/go-mapper/tools/`; Go's module and build caches are
//! the user's (reused across builds). `protoc` is the `protoc-bin-vendored` crate's, or
//! `$PROTOC`.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// The binary's file name.
pub const BINARY: &str = "go-virtual-mapper";

/// `mappers/go-virtual` in this repository.
pub fn source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../mappers/go-virtual")
}

/// `proto/dmi/v1beta1/api.proto` in this repository.
pub fn proto_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto/dmi/v1beta1/api.proto")
}

/// The `protoc` used: `$PROTOC` when set, else the binary shipped in the
/// `protoc-bin-vendored` crate (no system package needed).
///
/// # Errors
/// No vendored binary for this platform.
pub fn protoc_path() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("PROTOC").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    protoc_bin_vendored::protoc_bin_path().context("locating the vendored protoc")
}

/// The include directory holding `google/protobuf/*.proto` for [`protoc_path`]
/// (`$PROTOC_INCLUDE` when set).
///
/// # Errors
/// No vendored include directory for this platform.
pub fn protoc_include() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("PROTOC_INCLUDE").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    protoc_bin_vendored::include_path().context("locating the vendored protoc include directory")
}

/// `~/.cache/verge/go-mapper`, or `$VERGE_GO_MAPPER_CACHE`.
pub fn cache_root() -> PathBuf {
    std::env::var_os("VERGE_GO_MAPPER_CACHE")
        .filter(|p| !p.is_empty())
        .map_or_else(
            || crate::paths::verge_home().join("go-mapper"),
            PathBuf::from,
        )
}

/// SHA-256 (first 16 hex digits) over the build inputs: every regular file of
/// [`source_dir`] (by name, sorted) and [`proto_file`].
///
/// # Errors
/// An input cannot be read.
pub fn inputs_hash() -> anyhow::Result<String> {
    let files = crate::example_clients::inputs(&source_dir(), &[proto_file()])?;
    crate::example_clients::hash_files(&files)
}

/// Builds the Go mapper unless the cache holds a build of the current inputs, and returns
/// the binary's path. A build prints progress to stderr every 10 s: with empty Go module and
/// build caches (generator installs, module downloads, compile) it took 3 min on 2 busy
/// cores, with warm Go caches about 10 s; an unchanged tree costs a hash of the inputs.
/// Serialized across processes by `<cache root>/build.lock`.
///
/// # Errors
/// `go` is missing (needs `go` on `PATH` or in `/usr/local/go/bin`, and the Go module
/// proxy), or `build.sh` fails.
pub fn ensure_built() -> anyhow::Result<PathBuf> {
    let dir = cache_root().join(inputs_hash()?);
    let binary = dir.join("bin").join(BINARY);
    let script = source_dir().join("build.sh");
    let products = [binary.clone()];
    crate::example_clients::cached_build(&cache_root(), &dir, &products, "the Go mapper", || {
        run_protoc_script(
            &script,
            &dir,
            ("GO_MAPPER_TOOLS", &cache_root().join("tools")),
            "building the Go mapper",
        )
    })?;
    Ok(binary)
}

/// Runs a Go build `script` that generates code with `protoc` (`build.sh <dir>` with `PROTOC`
/// and `PROTOC_INCLUDE` from [`protoc_path`] and [`protoc_include`], and `tools`: the name and
/// directory of its generator cache), with Go on `PATH`; `what` names it in errors.
///
/// # Errors
/// `go` or the vendored protoc is missing, or the script fails.
pub fn run_protoc_script(
    script: &Path,
    dir: &Path,
    tools: (&str, &Path),
    what: &str,
) -> anyhow::Result<()> {
    let path = crate::go_build::go_path(what)?;
    let (protoc, include) = (protoc_path()?, protoc_include()?);
    crate::go_build::Script {
        path: script,
        args: &[dir.as_os_str()],
        env: &[
            ("PROTOC", protoc.as_os_str()),
            ("PROTOC_INCLUDE", include.as_os_str()),
            (tools.0, tools.1.as_os_str()),
        ],
        low_priority: false,
    }
    .run(&path)
}
