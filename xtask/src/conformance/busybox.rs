//! The busybox the e2e images are made on: release 1.37, as upstream's `busybox:1.37.0-2`
//! image. Its shell keeps environment variables whose names are not shell identifiers
//! (`data-1`), which the specs of Kubernetes' relaxed env-var names read back with `sh -c
//! env`; the busybox 1.35 of this machine's Debian release drops them. Debian's next release
//! (trixie) packages 1.37: its `busybox-static` is fetched with apt from Debian's own
//! archive (the signature checked against the installed Debian keyring) through a private
//! package list, without touching the system's sources, and cached.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail, ensure};

/// The Debian release that packages busybox 1.37.
const SUITE: &str = "trixie";
/// What `busybox` prints first for the wanted release.
const VERSION_PREFIX: &str = "BusyBox v1.37";

/// `<cache>/busybox-1.37/busybox`, fetched and extracted unless present.
///
/// # Errors
/// apt, `dpkg-deb` or file writes fail, or the binary is not busybox 1.37.
pub fn ensure(cache_dir: &Path) -> anyhow::Result<PathBuf> {
    let dir = cache_dir.join("busybox-1.37");
    let binary = dir.join("busybox");
    if binary.is_file() && version(&binary).is_ok_and(|v| v.starts_with(VERSION_PREFIX)) {
        return Ok(binary);
    }
    eprintln!("conformance:   fetching busybox-static 1.37 from Debian {SUITE}");
    let work = tempfile::tempdir().context("creating a directory for apt")?;
    let root = work.path();
    for sub in ["lists/partial", "archives/partial", "deb"] {
        std::fs::create_dir_all(root.join(sub))?;
    }
    let sources = root.join("sources.list");
    std::fs::write(
        &sources,
        format!(
            "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] \
             http://deb.debian.org/debian {SUITE} main\n"
        ),
    )?;
    let options = [
        format!("Dir::Etc::SourceList={}", sources.display()),
        "Dir::Etc::SourceParts=/dev/null".to_owned(),
        format!("Dir::State::Lists={}", root.join("lists").display()),
        format!("Dir::Cache::Archives={}", root.join("archives").display()),
        "APT::Sandbox::User=root".to_owned(),
    ];
    let apt = |args: &[&str], cwd: &Path| -> anyhow::Result<()> {
        let mut cmd = Command::new("apt-get");
        for o in &options {
            cmd.arg("-o").arg(o);
        }
        let out = cmd
            .args(args)
            .current_dir(cwd)
            .output()
            .context("running apt-get")?;
        ensure!(
            out.status.success(),
            "apt-get {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(())
    };
    apt(&["-q", "update"], root)?;
    apt(&["-q", "download", "busybox-static"], &root.join("deb"))?;
    let deb = std::fs::read_dir(root.join("deb"))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .context("apt-get download left no .deb")?;
    let extracted = root.join("x");
    let out = Command::new("dpkg-deb")
        .arg("-x")
        .arg(&deb)
        .arg(&extracted)
        .output()
        .context("running dpkg-deb")?;
    ensure!(
        out.status.success(),
        "dpkg-deb -x {} failed: {}",
        deb.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let found = ["bin/busybox", "usr/bin/busybox"]
        .into_iter()
        .map(|p| extracted.join(p))
        .find(|p| p.is_file())
        .with_context(|| format!("{} holds no busybox binary", deb.display()))?;
    let printed = version(&found)?;
    if !printed.starts_with(VERSION_PREFIX) {
        bail!("{} is {printed:?}, not {VERSION_PREFIX}", deb.display());
    }
    std::fs::create_dir_all(&dir)?;
    std::fs::copy(&found, &binary)?;
    Ok(binary)
}

/// The first line `busybox` prints about itself.
fn version(binary: &Path) -> anyhow::Result<String> {
    let out = Command::new(binary)
        .output()
        .with_context(|| format!("running {}", binary.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text.lines().next().unwrap_or_default().to_owned())
}
