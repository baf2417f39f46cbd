//! The e2e test images the selected specs use, made in the local Docker engine under their
//! exact names from the release's `test/utils/image/manifest.go`, without any registry:
//! each is a root filesystem imported with `docker import` (as the test kit's busybox image),
//! the busybox-based ones on busybox 1.37 ([`super::busybox`]). Each carries the label
//! [`REVISION_LABEL`]; an image of an older revision is made again.

use std::path::Path;
use std::process::Command;

use anyhow::{Context as _, bail};
use verge_testkit::docker;

use super::build::E2eBuild;

/// One e2e image: its exact reference and how it is made here.
#[derive(Debug, Clone, Copy)]
pub struct E2eImage {
    /// The reference the specs use (`manifest.go`'s registry, name and tag).
    pub reference: &'static str,
    /// How the image is made (for the progress lines and `docs/conformance.md`).
    pub how: &'static str,
    kind: Kind,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Agnhost,
    /// `AgnhostPrev`: the same agnhost as another image (the rolling-update specs only need
    /// two references).
    AgnhostPrev,
    /// kitten or nautilus: agnhost with the release's `test/images/<name>/html` files.
    WebImage(&'static str),
    Busybox,
    DnsTesting,
    Nginx,
    NonRoot,
    Nonewprivs,
    Pause,
}

/// The images of 1.37's `manifest.go` that the selected specs use: those of the
/// `[NodeConformance]` and `[Conformance]` specs of `test/e2e/{apps,auth,common,network,node,
/// scheduling,storage}` (learned with `--ginkgo.dry-run`, the specs' sources and the runs'
/// pull failures).
pub const IMAGES: [E2eImage; 11] = [
    E2eImage {
        reference: "registry.k8s.io/e2e-test-images/agnhost:2.66.1",
        how: "agnhost built from test/images/agnhost of the Kubernetes module (static Go binary) \
              on busybox 1.37; /agnhost-2 link, /uploads, porter's localhost.crt/key \
              and the user-defined-in-image user (uid 1000, gid 50000) as upstream's Dockerfile; \
              /bin/bash is Debian's bash-static and the network tools of upstream's alpine \
              image come from Debian trixie's packages (NET_TOOLS: OpenBSD nc, BIND's dig, \
              host and nslookup, curl, getent) in /usr/bin, ahead of busybox's applets on \
              PATH; /bin/sh stays busybox's; ENTRYPOINT /agnhost, CMD pause",
        kind: Kind::Agnhost,
    },
    E2eImage {
        reference: "registry.k8s.io/e2e-test-images/agnhost:2.55",
        how: "a stand-in for the previous agnhost (`AgnhostPrev`): agnhost 2.66.1 made as \
              above, with a label of its own so that it is a distinct image; the specs that \
              use it (Deployment and StatefulSet updates, pod image updates) only need a \
              second working agnhost to move to and from",
        kind: Kind::AgnhostPrev,
    },
    E2eImage {
        reference: "registry.k8s.io/e2e-test-images/kitten:1.8",
        how: "agnhost as above with test/images/kitten/html of the Kubernetes module \
              (`/kitten.jpg`, `/data.json`) and CMD test-webserver, as upstream's \
              Dockerfile; and, imitating the file of upstream's alpine base that the image \
              volume spec reads, an `/etc/os-release` naming Alpine Linux (and saying it is \
              Verge's stand-in)",
        kind: Kind::WebImage("kitten"),
    },
    E2eImage {
        reference: "registry.k8s.io/e2e-test-images/nautilus:1.8",
        how: "as kitten, with test/images/nautilus/html",
        kind: Kind::WebImage("nautilus"),
    },
    E2eImage {
        reference: "registry.k8s.io/e2e-test-images/busybox:1.37.0-2",
        how: "busybox 1.37 built static from its upstream source (default configuration), every \
              applet linked in /bin",
        kind: Kind::Busybox,
    },
    E2eImage {
        reference: "registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1",
        how: "busybox 1.37 as above with Debian trixie's BIND dig and glibc's getent \
              (DNS_TOOLS) in /usr/bin: the DNS specs' glibc prober runs dig and getent in it, \
              the `hostnameOverride` specs busybox's `hostname`; upstream's is Debian \
              bookworm-slim with dnsutils",
        kind: Kind::DnsTesting,
    },
    E2eImage {
        reference: "registry.k8s.io/e2e-test-images/nginx:1.27.0-2",
        how: "a stand-in: busybox 1.37's httpd serving /usr/share/nginx/html on port 80 \
              (upstream's is nginx on alpine); the EndpointSlice and Endpoints specs that use \
              it only need a running pod with an IP",
        kind: Kind::Nginx,
    },
    E2eImage {
        reference: "registry.k8s.io/e2e-test-images/nginx:1.28.0-2",
        how: "the same stand-in as nginx:1.27.0-2 (`NginxNew`, the image some update specs \
              move to)",
        kind: Kind::Nginx,
    },
    E2eImage {
        reference: "registry.k8s.io/e2e-test-images/nonroot:1.5",
        how: "busybox 1.37 with USER 1234, as upstream's Dockerfile",
        kind: Kind::NonRoot,
    },
    E2eImage {
        reference: "registry.k8s.io/e2e-test-images/nonewprivs:1.4",
        how: "nnp built from test/images/nonewprivs of the Kubernetes module (static Go binary, \
              setuid root in /usr/local/bin) on busybox 1.37; CMD nnp",
        kind: Kind::Nonewprivs,
    },
    E2eImage {
        reference: "registry.k8s.io/pause:3.10.2",
        how: "build/pause/linux/pause.c of the Kubernetes module, gcc -static; \
              ENTRYPOINT /pause, user 65535",
        kind: Kind::Pause,
    },
];

/// The label every image made here carries, and its value for the current way of making
/// them; an image without it (or with another value) is made again.
pub const REVISION_LABEL: &str = "verge.conformance.revision";
const REVISION: &str = "4-busybox-1.37-debian-net-tools";

/// Debian packages agnhost gets: the tools of upstream's alpine image the network specs run
/// (`nc -t`/`-u`, `dig`, `nslookup`, `curl --interface`, `getent`).
const NET_TOOLS: [&str; 4] = ["netcat-openbsd", "bind9-dnsutils", "curl", "libc-bin"];

/// Debian packages glibc-dns-testing gets (`dig`, `getent`).
const DNS_TOOLS: [&str; 2] = ["bind9-dnsutils", "libc-bin"];

/// The Debian release the tools come from (the busybox's).
const TOOLS_SUITE: &str = "trixie";

/// Makes every image of [`IMAGES`] that Docker lacks (or holds from an older revision);
/// prints which exist and which it made.
///
/// # Errors
/// Docker, the compiler, apt, package installation or file writes fail.
pub fn ensure_images(build: &E2eBuild) -> anyhow::Result<()> {
    let mut busybox = None;
    let mut archive = None;
    for image in IMAGES {
        if docker::image_exists(image.reference) && revision(image.reference) == REVISION {
            eprintln!("conformance:   {} exists", image.reference);
            continue;
        }
        eprintln!("conformance:   making {}: {}", image.reference, image.how);
        let root = tempfile::tempdir().context("creating an image rootfs")?;
        let label = format!("LABEL {REVISION_LABEL}={REVISION}");
        if busybox.is_none() && !matches!(image.kind, Kind::Pause) {
            busybox = Some(super::busybox::ensure(&build.cache_dir)?);
        }
        let base = |root: &Path| match &busybox {
            Some(b) => docker::busybox_rootfs_from(b, root),
            None => bail!("no busybox"),
        };
        match image.kind {
            Kind::Busybox => {
                base(root.path())?;
                docker::import_rootfs(
                    root.path(),
                    image.reference,
                    &["ENV PATH=/bin", r#"CMD ["/bin/sh"]"#, &label],
                )?;
            }
            Kind::Agnhost | Kind::AgnhostPrev | Kind::WebImage(_) => {
                base(root.path())?;
                tools(&mut archive, root.path(), &NET_TOOLS)?;
                std::os::unix::fs::symlink("nc.openbsd", root.path().join("usr/bin/nc"))?;
                let mut extra = vec![label.clone()];
                match image.kind {
                    Kind::AgnhostPrev => extra.push(format!(
                        "LABEL verge.conformance.stand-in=\"agnhost 2.66.1 as {}\"",
                        image.reference
                    )),
                    Kind::WebImage(name) => {
                        web_files(build, root.path(), name)?;
                        extra.push(r#"CMD ["test-webserver"]"#.to_owned());
                    }
                    _ => {}
                }
                agnhost(build, root.path(), image.reference, &extra)?;
            }
            Kind::DnsTesting => {
                base(root.path())?;
                tools(&mut archive, root.path(), &DNS_TOOLS)?;
                docker::import_rootfs(
                    root.path(),
                    image.reference,
                    &[TOOLS_PATH, r#"CMD ["/bin/sh"]"#, &label],
                )?;
            }
            Kind::Nginx => {
                base(root.path())?;
                let html = root.path().join("usr/share/nginx/html");
                std::fs::create_dir_all(&html)?;
                std::fs::write(html.join("index.html"), "Welcome to nginx!\n")?;
                docker::import_rootfs(
                    root.path(),
                    image.reference,
                    &[
                        "ENV PATH=/bin",
                        r#"CMD ["httpd", "-f", "-p", "80", "-h", "/usr/share/nginx/html"]"#,
                        "EXPOSE 80",
                        &label,
                    ],
                )?;
            }
            Kind::NonRoot => {
                base(root.path())?;
                docker::import_rootfs(
                    root.path(),
                    image.reference,
                    &["ENV PATH=/bin", r#"CMD ["/bin/sh"]"#, "USER 1234", &label],
                )?;
            }
            Kind::Nonewprivs => {
                base(root.path())?;
                nonewprivs(build, root.path(), image.reference, &label)?;
            }
            Kind::Pause => pause(build, root.path(), image.reference, "3.10.2", &label)?,
        }
    }
    Ok(())
}

/// The [`REVISION_LABEL`] of local image `reference` (empty when unset).
fn revision(reference: &str) -> String {
    let format = format!("{{{{index .Config.Labels \"{REVISION_LABEL}\"}}}}");
    docker::docker(&["image", "inspect", "-f", &format, reference]).unwrap_or_default()
}

/// `PATH` of the images with Debian's tools: theirs ahead of busybox's applets.
const TOOLS_PATH: &str = "ENV PATH=/usr/local/bin:/usr/bin:/bin";

/// Unpacks Debian `packages` with their dependencies into `root` (the archive's lists are
/// fetched once per [`ensure_images`]) and writes its `/etc/nsswitch.conf` as Debian's.
fn tools(
    archive: &mut Option<verge_testkit::debian::Archive>,
    root: &Path,
    packages: &[&str],
) -> anyhow::Result<()> {
    let archive = match archive {
        Some(archive) => archive,
        None => archive.insert(verge_testkit::debian::Archive::new(TOOLS_SUITE, false)?),
    };
    let count = archive.install_closure(packages, root)?;
    eprintln!(
        "conformance:     {} Debian {TOOLS_SUITE} packages for {}",
        count,
        packages.join(", ")
    );
    std::fs::write(
        root.join("etc/nsswitch.conf"),
        "passwd: files\ngroup: files\nhosts: files dns\nnetworks: files\n",
    )?;
    Ok(())
}

/// The files of kitten or nautilus (`name`) in `root`: the release's
/// `test/images/<name>/html` files at `/`, and an `/etc/os-release` imitating upstream's
/// alpine base (see [`IMAGES`]).
fn web_files(build: &E2eBuild, root: &Path, name: &str) -> anyhow::Result<()> {
    let html = build
        .kubernetes_source()
        .join("test/images")
        .join(name)
        .join("html");
    for entry in std::fs::read_dir(&html).with_context(|| format!("reading {}", html.display()))? {
        let entry = entry?;
        std::fs::copy(entry.path(), root.join(entry.file_name()))?;
    }
    std::fs::write(
        root.join("etc/os-release"),
        "NAME=\"Alpine Linux\"\nID=alpine\nPRETTY_NAME=\"Alpine Linux (imitated: Verge's \
         conformance stand-in, busybox 1.37 and agnhost)\"\n",
    )?;
    Ok(())
}

/// The agnhost image in `root` (see [`IMAGES`]), with the Dockerfile `extra` lines (its
/// label, and a CMD replacing `pause`).
fn agnhost(build: &E2eBuild, root: &Path, reference: &str, extra: &[String]) -> anyhow::Result<()> {
    std::fs::copy(build.agnhost(), root.join("agnhost"))
        .with_context(|| format!("copying {}", build.agnhost().display()))?;
    std::os::unix::fs::symlink("agnhost", root.join("agnhost-2"))?;
    std::fs::create_dir_all(root.join("uploads"))?;
    let porter = build.kubernetes_source().join("test/images/agnhost/porter");
    for file in ["localhost.crt", "localhost.key"] {
        std::fs::copy(porter.join(file), root.join(file))
            .with_context(|| format!("copying {}", porter.join(file).display()))?;
    }
    append(
        &root.join("etc/passwd"),
        "user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n",
    )?;
    append(
        &root.join("etc/group"),
        "user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n",
    )?;
    std::fs::create_dir_all(root.join("home/user-defined-in-image"))?;
    let bash = super::busybox::ensure_bash(&build.cache_dir)?;
    std::fs::copy(&bash, root.join("bin/bash"))
        .with_context(|| format!("copying {}", bash.display()))?;
    let mut lines = vec![
        TOOLS_PATH,
        r#"ENTRYPOINT ["/agnhost"]"#,
        r#"CMD ["pause"]"#,
        "EXPOSE 80 8080 8081 9376 5000",
    ];
    lines.extend(extra.iter().map(String::as_str));
    docker::import_rootfs(root, reference, &lines)
}

/// The nonewprivs image in `root`: `nnp` (prints its effective uid) setuid root.
fn nonewprivs(build: &E2eBuild, root: &Path, reference: &str, label: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = root.join("usr/local/bin");
    std::fs::create_dir_all(&dir)?;
    build.go_build("k8s.io/kubernetes/test/images/nonewprivs", &dir.join("nnp"))?;
    std::fs::set_permissions(dir.join("nnp"), std::fs::Permissions::from_mode(0o4755))?;
    docker::import_rootfs(
        root,
        reference,
        &["ENV PATH=/usr/local/bin:/bin", r#"CMD ["nnp"]"#, label],
    )
}

/// The pause image in `root`: the release's own `pause.c`, compiled static.
fn pause(
    build: &E2eBuild,
    root: &Path,
    reference: &str,
    version: &str,
    label: &str,
) -> anyhow::Result<()> {
    verge_testkit::packages::ensure_debian_packages(&["gcc", "libc6-dev"])?;
    let source = build.kubernetes_source().join("build/pause/linux/pause.c");
    let out = Command::new("gcc")
        .args(["-static", "-Os", "-s"])
        .arg(format!("-DVERSION=v{version}"))
        .arg("-o")
        .arg(root.join("pause"))
        .arg(&source)
        .output()
        .context("running gcc")?;
    if !out.status.success() {
        bail!(
            "gcc -static {} failed: {}",
            source.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    docker::import_rootfs(
        root,
        reference,
        &[r#"ENTRYPOINT ["/pause"]"#, "USER 65535:65535", label],
    )
}

/// Appends `text` to the file at `path`.
fn append(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    file.write_all(text.as_bytes())?;
    Ok(())
}
