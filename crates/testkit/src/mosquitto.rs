//! A real MQTT broker for tests: Debian's `mosquitto`, one private instance per handle.
//!
//! [`Mosquitto::start`] installs the package on demand ([`ensure_mosquitto`]), writes a config
//! file, a password file (hashed by the package's `mosquitto_passwd`) and a client password
//! file into a fresh temporary directory, and starts the broker on a free loopback port. It is
//! secure by default: it listens on `127.0.0.1` only, refuses anonymous clients and accepts one
//! user with a random password. Dropping the handle kills the broker and removes the directory.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, bail};
use rand::distr::{Alphanumeric, SampleString as _};

use crate::packages;
use crate::ports::free_port;
use crate::process::ChildProcess;

/// The Debian package holding the broker (`/usr/sbin/mosquitto`) and `mosquitto_passwd`.
pub const MOSQUITTO_PACKAGE: &str = "mosquitto";

/// The broker executable the package installs.
pub const MOSQUITTO_BIN: &str = "/usr/sbin/mosquitto";

/// The user name every test broker accepts.
pub const MOSQUITTO_USER: &str = "verge-test";

/// How long [`Mosquitto::start`] waits for the broker to listen.
pub const MOSQUITTO_START_TIMEOUT: Duration = Duration::from_secs(15);

/// Installs Debian's `mosquitto` when `/usr/sbin/mosquitto` is missing (blocking; apt-get).
///
/// # Errors
/// See [`packages::ensure_debian_packages`].
pub fn ensure_mosquitto() -> anyhow::Result<()> {
    if Path::new(MOSQUITTO_BIN).is_file() {
        return Ok(());
    }
    packages::ensure_debian_packages(&[MOSQUITTO_PACKAGE])
}

/// A running mosquitto broker on `127.0.0.1:<port>` requiring [`MOSQUITTO_USER`] and a random
/// password; killed on drop.
#[derive(Debug)]
pub struct Mosquitto {
    // Declared first so the broker is killed before its directory is removed.
    process: Option<ChildProcess>,
    port: u16,
    password: String,
    dir: tempfile::TempDir,
}

impl Mosquitto {
    /// Installs the package if needed and starts a broker on a free loopback port.
    ///
    /// # Errors
    /// The package cannot be installed, the files cannot be written, `mosquitto_passwd`
    /// fails, or the broker does not run within [`MOSQUITTO_START_TIMEOUT`] (the error holds
    /// its log tail).
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_with_acl(&[], None).await
    }

    /// Like [`Mosquitto::start`], with more users (`users`, each with the same password as
    /// [`MOSQUITTO_USER`]) and, when `acl` is given, that text as the broker's `acl_file`
    /// (e.g. what `edgecore mqtt-acl` prints): each user then reaches only the topics it
    /// grants.
    ///
    /// # Errors
    /// As [`Mosquitto::start`].
    pub async fn start_with_acl(users: &[&str], acl: Option<&str>) -> anyhow::Result<Self> {
        tokio::task::spawn_blocking(ensure_mosquitto).await??;
        let dir = tempfile::Builder::new()
            .prefix("verge-mosquitto-")
            .tempdir()
            .context("creating the broker's directory")?;
        let mut all = vec![MOSQUITTO_USER];
        all.extend_from_slice(users);
        let password = write_credentials_for(dir.path(), &all)?;
        if let Some(acl) = acl {
            write_private(&dir.path().join("acl"), acl)?;
        }
        let mut last_error = None;
        // A free port can still be taken between the pick and the broker's bind: retry.
        for _ in 0..3 {
            let port = free_port()?;
            match spawn_broker(dir.path(), port).await {
                Ok(process) => {
                    return Ok(Self {
                        port,
                        password,
                        dir,
                        process: Some(process),
                    });
                }
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| anyhow::anyhow!("mosquitto did not start")))
    }

    /// The listening port on `127.0.0.1`.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`.
    pub fn address(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// The broker as edgecore's `eventBus.mqttServer` names it: `tcp://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("tcp://127.0.0.1:{}", self.port)
    }

    /// The one accepted user name ([`MOSQUITTO_USER`]).
    pub fn username(&self) -> &str {
        MOSQUITTO_USER
    }

    /// The user's password (24 random alphanumerics).
    pub fn password(&self) -> &str {
        &self.password
    }

    /// A file (mode 0600) holding the password and a newline, for clients configured with a
    /// password file (edgecore's `eventBus.passwordFile`).
    pub fn password_file(&self) -> PathBuf {
        self.dir.path().join("client-password")
    }

    /// Whether the broker process is running.
    pub fn is_running(&mut self) -> bool {
        self.process.as_mut().is_some_and(ChildProcess::is_running)
    }

    /// The broker's log so far (stdout and stderr; empty when stopped).
    pub fn log(&self) -> String {
        self.process
            .as_ref()
            .map(ChildProcess::log)
            .unwrap_or_default()
    }

    /// Kills the broker (SIGKILL: clients see the connection drop); the port, credentials
    /// and files stay for [`Mosquitto::restart`]. A no-op when stopped.
    ///
    /// # Errors
    /// The process cannot be killed or reaped.
    pub fn stop(&mut self) -> anyhow::Result<()> {
        if let Some(mut process) = self.process.take() {
            process.kill9()?;
        }
        Ok(())
    }

    /// Starts the broker again on the same port with the same credentials (stopping it first
    /// when it runs).
    ///
    /// # Errors
    /// As [`Mosquitto::start`], e.g. the port was taken meanwhile.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.stop()?;
        self.process = Some(spawn_broker(self.dir.path(), self.port).await?);
        Ok(())
    }
}

/// Writes a broker's credentials into `dir`: a random password for [`MOSQUITTO_USER`], the
/// broker's password file `passwd` (hashed with `mosquitto_passwd -U`) and the client's
/// `client-password` (mode 0600, the password and a newline). Returns the password.
///
/// # Errors
/// A file cannot be written or `mosquitto_passwd` fails.
pub fn write_credentials(dir: &Path) -> anyhow::Result<String> {
    write_credentials_for(dir, &[MOSQUITTO_USER])
}

/// [`write_credentials`] for each of `users`, all with the same password.
fn write_credentials_for(dir: &Path, users: &[&str]) -> anyhow::Result<String> {
    let password = Alphanumeric.sample_string(&mut rand::rng(), 24);
    write_private(&dir.join("client-password"), &format!("{password}\n"))?;
    let passwd = dir.join("passwd");
    let lines: String = users.iter().map(|u| format!("{u}:{password}\n")).collect();
    write_private(&passwd, &lines)?;
    let status = Command::new("mosquitto_passwd")
        .arg("-U")
        .arg(&passwd)
        .stdin(Stdio::null())
        .status()
        .context("running mosquitto_passwd -U")?;
    if !status.success() {
        bail!("mosquitto_passwd -U {} failed: {status}", passwd.display());
    }
    Ok(password)
}

/// Writes `<dir>/mosquitto.conf` for a broker on `127.0.0.1:port` using the credentials of
/// [`write_credentials`] in `dir` (for a broker started by other means, e.g. detached by the
/// quickstart); returns its path.
///
/// # Errors
/// The file cannot be written.
pub fn write_config(dir: &Path, port: u16) -> anyhow::Result<PathBuf> {
    let config = dir.join("mosquitto.conf");
    write_private(&config, &config_text(dir, port))?;
    Ok(config)
}

/// Writes `<dir>/mosquitto.conf` for `port` and starts the broker, waiting until it logs that
/// it runs.
async fn spawn_broker(dir: &Path, port: u16) -> anyhow::Result<ChildProcess> {
    let config = write_config(dir, port)?;
    let mut process = ChildProcess::spawn(
        MOSQUITTO_BIN,
        [Path::new("-c"), &config],
        std::iter::empty::<(&str, &str)>(),
    )?;
    process
        .wait_for_log(" running", MOSQUITTO_START_TIMEOUT)
        .await
        .with_context(|| format!("starting mosquitto on 127.0.0.1:{port}"))?;
    Ok(process)
}

/// mosquitto.conf: one loopback listener, no anonymous access, the password file
/// `<dir>/passwd` (and the ACL file `<dir>/acl` when there is one), no persistence, `TCP_NODELAY` on its sockets (no Nagle delay on small
/// replies), log to stderr. As root, `user root` keeps the broker from
/// switching to the `mosquitto` user, which could not read the private directory.
fn config_text(dir: &Path, port: u16) -> String {
    let mut text = format!(
        "per_listener_settings false\n\
         listener {port} 127.0.0.1\n\
         allow_anonymous false\n\
         password_file {passwd}\n\
         persistence false\n\
         set_tcp_nodelay true\n\
         log_dest stderr\n\
         log_type error\nlog_type warning\nlog_type notice\nlog_type information\n\
         connection_messages true\n",
        passwd = dir.join("passwd").display(),
    );
    if packages::is_root() {
        text.push_str("user root\n");
    }
    let acl = dir.join("acl");
    if acl.is_file() {
        text.push_str(&format!("acl_file {}\n", acl.display()));
    }
    text
}

/// Writes `text` to a new file at `path` with mode 0600 (credentials).
pub(crate) fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.write_all(text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}
