//! Packages fetched from Debian's own archive with apt, through a private package list that
//! leaves the system's sources untouched; apt checks the archive's signature against the
//! installed Debian keyring and each file's hash, so nothing unsigned gets in.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, ensure};

/// A private apt set-up for one Debian release, in a temporary directory.
pub struct Archive {
    root: tempfile::TempDir,
    options: Vec<String>,
}

impl Archive {
    /// Lists of `suite`'s `main` (binary packages, and source packages too when `sources`),
    /// freshly fetched with `apt-get update`.
    ///
    /// # Errors
    /// apt fails (no network to deb.debian.org, a bad signature) or file writes fail.
    pub fn new(suite: &str, sources: bool) -> anyhow::Result<Self> {
        let root = tempfile::tempdir().context("creating a directory for apt")?;
        for sub in ["lists/partial", "archives/partial"] {
            std::fs::create_dir_all(root.path().join(sub))?;
        }
        let list = root.path().join("sources.list");
        let line = |kind: &str| {
            format!(
                "{kind} [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] \
                 http://deb.debian.org/debian {suite} main\n"
            )
        };
        let mut text = line("deb");
        if sources {
            text.push_str(&line("deb-src"));
        }
        std::fs::write(&list, text)?;
        let options = vec![
            format!("Dir::Etc::SourceList={}", list.display()),
            "Dir::Etc::SourceParts=/dev/null".to_owned(),
            format!("Dir::State::Lists={}", root.path().join("lists").display()),
            format!(
                "Dir::Cache::Archives={}",
                root.path().join("archives").display()
            ),
            "APT::Sandbox::User=root".to_owned(),
        ];
        let archive = Self { root, options };
        archive.apt(&["-q", "update"], archive.root.path())?;
        Ok(archive)
    }

    /// Downloads binary package `name` and unpacks it (`dpkg-deb -x`); returns the directory
    /// it was unpacked into.
    ///
    /// # Errors
    /// apt or `dpkg-deb` fail.
    pub fn unpack(&self, name: &str) -> anyhow::Result<PathBuf> {
        let dir = self.fresh_dir(&format!("deb-{name}"))?;
        self.apt(&["-q", "download", name], &dir)?;
        let deb = find(&dir, |n| n.ends_with(".deb"))
            .with_context(|| format!("apt-get download {name} left no .deb"))?;
        let out_dir = self.fresh_dir(&format!("x-{name}"))?;
        unpack(&deb, &out_dir)?;
        Ok(out_dir)
    }

    /// Downloads binary packages `names` with everything they depend on (as `apt-get install`
    /// onto an empty system, without recommends) and unpacks each into `root` with
    /// `dpkg-deb -x`, without running any maintainer script; then drops documentation,
    /// links `/lib` and `/lib64` to their `/usr` directories as Debian's merged `/usr` has
    /// them (when `root` lacks them) and writes the dynamic linker's cache
    /// (`ldconfig -r root`). Returns how many packages were unpacked.
    ///
    /// # Errors
    /// apt, `dpkg-deb` or `ldconfig` fail.
    pub fn install_closure(&self, names: &[&str], root: &Path) -> anyhow::Result<usize> {
        let dir = self.fresh_dir("closure")?;
        let status = dir.join("status");
        std::fs::write(&status, "")?;
        let archives = dir.join("archives");
        std::fs::create_dir_all(archives.join("partial"))?;
        let mut args = vec![
            "-o".to_owned(),
            format!("Dir::State::status={}", status.display()),
            "-o".to_owned(),
            format!("Dir::Cache={}", dir.display()),
            "-o".to_owned(),
            format!("Dir::Cache::Archives={}", archives.display()),
            "-q".to_owned(),
            "-y".to_owned(),
            "--download-only".to_owned(),
            "--no-install-recommends".to_owned(),
            "install".to_owned(),
        ];
        args.extend(names.iter().map(|n| (*n).to_owned()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.apt(&args, &dir)?;
        let mut count = 0;
        for entry in std::fs::read_dir(&archives)? {
            let deb = entry?.path();
            if deb.extension().is_none_or(|e| e != "deb") {
                continue;
            }
            unpack(&deb, root)?;
            count += 1;
        }
        for docs in [
            "usr/share/doc",
            "usr/share/man",
            "usr/share/info",
            "usr/share/locale",
        ] {
            let _ = std::fs::remove_dir_all(root.join(docs));
        }
        for link in ["lib", "lib64"] {
            if !root.join(link).exists() && root.join("usr").join(link).is_dir() {
                std::os::unix::fs::symlink(format!("usr/{link}"), root.join(link))?;
            }
        }
        checked(Command::new("ldconfig").arg("-r").arg(root))?;
        Ok(count)
    }

    /// Downloads the files of source package `name` (`apt-get source --download-only`: the
    /// upstream `.orig` tarball, Debian's changes and the `.dsc`); returns their directory.
    ///
    /// # Errors
    /// apt fails (the archive was made without `sources`).
    pub fn source(&self, name: &str) -> anyhow::Result<PathBuf> {
        let dir = self.fresh_dir(&format!("src-{name}"))?;
        self.apt(&["-q", "--download-only", "source", name], &dir)?;
        Ok(dir)
    }

    fn fresh_dir(&self, name: &str) -> anyhow::Result<PathBuf> {
        let dir = self.root.path().join(name);
        std::fs::create_dir_all(&dir)?;
        Ok(dir)
    }

    fn apt(&self, args: &[&str], cwd: &Path) -> anyhow::Result<()> {
        let mut cmd = Command::new("apt-get");
        for o in &self.options {
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
    }
}

/// `dpkg-deb -x deb into`: the package's files, no maintainer script run.
fn unpack(deb: &Path, into: &Path) -> anyhow::Result<()> {
    checked(Command::new("dpkg-deb").arg("-x").arg(deb).arg(into))
}

/// Runs `cmd`; fails with its command line and stderr unless it succeeds.
fn checked(cmd: &mut Command) -> anyhow::Result<()> {
    let line = format!("{cmd:?}");
    let out = cmd.output().with_context(|| format!("running {line}"))?;
    ensure!(
        out.status.success(),
        "{line} failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

/// The first file of `dir` whose name satisfies `pred`.
pub fn find(dir: &Path, pred: impl Fn(&str) -> bool) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(&pred))
}
