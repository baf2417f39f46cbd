//! `cargo xtask images [--tag 0.1.0] [--save <dir>]`: container images of cloudhub,
//! edgecontroller, devicecontroller, edgecore and virtual-mapper (the virtual-device mapper of
//! `mappers/virtual`), `verge/<binary>:<tag>`, in the local Docker engine (the test kit's,
//! started when needed), without downloading a base image: statically linked release
//! binaries `FROM scratch`, running as user 65532, ready for a read-only root file system.
//!
//! Layout: [`binaries`](mod@binaries) (the static build and the ELF check),
//! [`context`](mod@context) (the Dockerfile and files of one image). Contexts are written to
//! `target/images/<binary>/`; `--save` writes `docker save` archives `<dir>/<binary>.tar`
//! (a node imports them into containerd with `ctr -n k8s.io images import`).

mod binaries;
mod context;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{Context as _, bail};

use context::{IMAGES, Image, Labels};

/// Arguments of `cargo xtask images`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The image tag (`verge/<binary>:<tag>`); the manifests in deploy/cloud use the
    /// workspace version.
    #[arg(long, default_value = env!("CARGO_PKG_VERSION"))]
    pub tag: String,
    /// Also write `docker save` archives of the images into this directory.
    #[arg(long)]
    pub save: Option<PathBuf>,
    /// The cargo profile of the binaries. `release` makes the images users get;
    /// `cargo xtask test` uses `images-test` (the same code without release's optimisation
    /// time, see Cargo.toml).
    #[arg(long, default_value = "release")]
    pub profile: String,
}

/// What one built image measured.
#[derive(Debug)]
pub struct Built {
    /// `verge/<binary>:<tag>`.
    pub reference: String,
    /// The image size the engine reports, in bytes.
    pub size: u64,
    /// The `docker save` archive, when asked for.
    pub archive: Option<PathBuf>,
    /// The static binary the image holds (e.g. for running edgecore on this host).
    pub bin: PathBuf,
}

/// The image reference of `bin` with `tag`.
pub fn reference(bin: &str, tag: &str) -> String {
    format!("{}{bin}:{tag}", verge_testkit::docker::VERGE_IMAGES)
}

/// Builds the images (see the module docs).
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let built = tokio::task::spawn_blocking(move || build_all(&args)).await??;
    println!("{:<32} {:>9}", "image", "size (MB)");
    for image in &built {
        println!("{:<32} {:>9.1}", image.reference, megabytes(image.size));
        if let Some(archive) = &image.archive {
            println!("  saved to {}", archive.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Builds every image of [`IMAGES`] with `args`, printing progress and timings on stderr.
///
/// # Errors
/// Docker cannot be started, cargo or `docker build`/`save` fail, or a binary is not static.
pub fn build_all(args: &Args) -> anyhow::Result<Vec<Built>> {
    let workspace = workspace_dir();
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace.join("target"), PathBuf::from);
    eprintln!("xtask images: [1/3] the Docker engine");
    verge_testkit::docker::ensure_docker()?;
    // A node importing these images (a test, the quickstart) waits until they are written.
    let _writing = verge_testkit::docker::ImagesLock::acquire()?;

    let triple = crate::fuzz::host_triple()?;
    eprintln!(
        "xtask images: [2/3] static binaries (profile {}, {triple}, {}); a cold release build \
         takes several minutes",
        args.profile,
        binaries::STATIC_RUSTFLAGS
    );
    let started = Instant::now();
    let bin_dir = binaries::build(&workspace, &target_dir, &triple, &args.profile)?;
    eprintln!("xtask images: binaries built in {:.1?}", started.elapsed());
    for image in &IMAGES {
        binaries::check_static(&binaries::path(&bin_dir, image.bin))?;
    }

    eprintln!(
        "xtask images: [3/3] docker build (FROM scratch) of {} images",
        IMAGES.len()
    );
    let labels = Labels {
        version: args.tag.clone(),
        source: env!("CARGO_PKG_REPOSITORY").to_owned(),
        revision: git_revision(&workspace),
    };
    if let Some(dir) = &args.save {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut built = Vec::new();
    for image in &IMAGES {
        let started = Instant::now();
        let dir = target_dir.join("images").join(image.bin);
        context::write(&dir, image, &binaries::path(&bin_dir, image.bin), &labels)?;
        let reference = reference(image.bin, &args.tag);
        docker_build(&dir, &reference)?;
        let size = image_size(&reference)?;
        let archive = match &args.save {
            Some(save) => Some(docker_save(save, image, &reference)?),
            None => None,
        };
        eprintln!(
            "xtask images: {reference}: {:.1} MB, built in {:.1?}",
            megabytes(size),
            started.elapsed()
        );
        built.push(Built {
            reference,
            size,
            archive,
            bin: binaries::path(&bin_dir, image.bin),
        });
    }
    Ok(built)
}

/// Bytes as megabytes (10^6).
pub fn megabytes(bytes: u64) -> f64 {
    // Sizes stay far below 2^52: the conversion is exact enough.
    #[allow(clippy::cast_precision_loss)]
    let mb = bytes as f64 / 1e6;
    mb
}

/// The workspace root (the parent of `xtask/`).
fn workspace_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    dir.canonicalize().unwrap_or(dir)
}

/// `git rev-parse HEAD` in `workspace`, when git answers.
fn git_revision(workspace: &Path) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(workspace)
        .args(["rev-parse", "HEAD"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// `docker build -t <reference> <dir>`; docker prints its steps.
fn docker_build(dir: &Path, reference: &str) -> anyhow::Result<()> {
    let status = Command::new("docker")
        .args(["build", "--tag", reference])
        .arg(dir)
        .status()
        .context("running docker build")?;
    if !status.success() {
        bail!("docker build of {reference} failed: {status}");
    }
    Ok(())
}

/// The size of `reference` in bytes (`docker image inspect`).
fn image_size(reference: &str) -> anyhow::Result<u64> {
    let size =
        verge_testkit::docker::docker(&["image", "inspect", "--format", "{{.Size}}", reference])?;
    size.parse()
        .with_context(|| format!("docker reported the size of {reference} as {size:?}"))
}

/// `docker save` of `reference` to `<dir>/<binary>.tar`.
fn docker_save(dir: &Path, image: &Image, reference: &str) -> anyhow::Result<PathBuf> {
    let archive = dir.join(format!("{}.tar", image.bin));
    let path = archive.to_string_lossy();
    verge_testkit::docker::docker(&["save", "--output", &path, reference])?;
    Ok(archive)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_and_sizes() {
        assert_eq!(reference("cloudhub", "0.1.0"), "verge/cloudhub:0.1.0");
        assert!((megabytes(12_345_678) - 12.345_678).abs() < 1e-9);
    }

    #[test]
    fn default_tag_is_the_workspace_version_the_manifests_use() {
        let manifest = std::fs::read_to_string(workspace_dir().join("deploy/cloud/cloudhub.yaml"))
            .expect("deploy/cloud/cloudhub.yaml");
        let wanted = format!(
            "image: {}",
            reference("cloudhub", env!("CARGO_PKG_VERSION"))
        );
        assert!(
            manifest.contains(&wanted),
            "deploy/cloud/cloudhub.yaml lacks {wanted:?}"
        );
    }

    #[test]
    fn the_mapper_example_names_an_image_built_here() {
        let path = "deploy/examples/devices/virtual-mapper.yaml";
        let manifest =
            std::fs::read_to_string(workspace_dir().join(path)).expect("the mapper example");
        let wanted = format!(
            "image: {}",
            reference("virtual-mapper", env!("CARGO_PKG_VERSION"))
        );
        assert!(manifest.contains(&wanted), "{path} lacks {wanted:?}");
        assert!(IMAGES.iter().any(|image| image.bin == "virtual-mapper"));
    }
}
