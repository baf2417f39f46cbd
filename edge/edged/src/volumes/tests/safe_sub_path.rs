//! Safe subPaths (CVE-2017-1002101): the walk refuses symlinks leading out of the volume
//! and creates nothing outside it; pins survive a swap of the checked path; item paths and
//! the memory backing of secret volumes.

use std::os::unix::fs::{MetadataExt, symlink};

use serde_json::json;

use super::*;
use crate::volumes::error::SubPathError;
use crate::volumes::safe_open::open_in;

/// Whether the tests run as root (bind mounts and tmpfs need it).
pub(super) fn root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The file system types mounted on `p`, bottom first (`/proc/self/mountinfo`).
fn fs_types(p: &Path) -> Vec<String> {
    let p = std::fs::canonicalize(p).expect("canonical");
    let text = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    text.lines()
        .filter(|l| l.split(' ').nth(4) == p.to_str())
        .filter_map(|l| Some(l.split_once(" - ")?.1.split(' ').next()?.to_owned()))
        .collect()
}

/// A tempdir with a volume `vol/` (mode 0750) and a "host" directory `host/` beside it.
fn volume() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let d = tempfile::tempdir().expect("tempdir");
    let (vol, host) = (d.path().join("vol"), d.path().join("host"));
    std::fs::create_dir(&vol).expect("vol");
    std::fs::set_permissions(&vol, std::fs::Permissions::from_mode(0o750)).expect("chmod");
    std::fs::create_dir(&host).expect("host");
    (d, vol, host)
}

fn escapes(r: std::result::Result<safe_open::Opened, SubPathError>) -> PathBuf {
    match r {
        Err(SubPathError::Escapes(p)) => p,
        other => panic!("expected Escapes, got {other:?}"),
    }
}

#[test]
fn symlinks_out_of_the_volume_are_refused_and_nothing_is_created() {
    let (_d, vol, host) = volume();
    symlink("/", vol.join("root")).expect("link");
    symlink("../..", vol.join("up")).expect("link");
    symlink(&host, vol.join("abs")).expect("link");
    symlink("../host", vol.join("sibling")).expect("link");
    std::fs::create_dir(vol.join("d")).expect("d");
    symlink("../../host", vol.join("d/deep")).expect("link");

    for (sub, link) in [
        ("root", "root"),
        ("root/verge-should-not-exist", "root"),
        ("up", "up"),
        ("up/x", "up"),
        ("abs/made", "abs"),
        ("sibling/made", "sibling"),
        ("d/deep/made", "d/deep"),
    ] {
        let got = escapes(open_in(&vol, Path::new(sub), true));
        assert_eq!(got, Path::new(link), "{sub}");
    }
    assert!(!Path::new("/verge-should-not-exist").exists());
    assert_eq!(
        std::fs::read_dir(&host).expect("host").count(),
        0,
        "nothing made in the host directory"
    );
    let mut names: Vec<_> = std::fs::read_dir(&vol)
        .expect("vol")
        .map(|e| e.expect("entry").file_name())
        .collect();
    names.sort();
    assert_eq!(names, ["abs", "d", "root", "sibling", "up"], "nothing made");
}

#[test]
fn symlinks_inside_the_volume_are_followed() {
    // Decision (as the kubelet): a symlink that stays inside the volume is followed, so
    // `subPath: key` of a configMap volume (`key -> ..data/key`) works.
    let (_d, vol, _host) = volume();
    std::fs::create_dir_all(vol.join("inside/sub")).expect("inside");
    symlink("inside", vol.join("a")).expect("link");
    std::fs::create_dir(vol.join("d")).expect("d");
    symlink("../inside/./sub", vol.join("d/l")).expect("link");
    symlink("missing", vol.join("dangling")).expect("link");

    let ino = |p: &Path| std::fs::metadata(p).expect("meta").ino();
    let opened = open_in(&vol, Path::new("a/b"), true).expect("a/b");
    assert!(
        opened.is_dir && vol.join("inside/b").is_dir(),
        "made through a"
    );
    let opened_ino = rustix::fs::fstat(&opened.fd).expect("fstat").st_ino;
    assert_eq!(opened_ino, ino(&vol.join("inside/b")));
    let opened = open_in(&vol, Path::new("d/l"), false).expect("d/l");
    let opened_ino = rustix::fs::fstat(&opened.fd).expect("fstat").st_ino;
    assert_eq!(opened_ino, ino(&vol.join("inside/sub")));
    open_in(&vol, Path::new("dangling"), true).expect("dangling inside");
    assert!(
        vol.join("missing").is_dir(),
        "its target made inside the volume"
    );

    symlink("l2", vol.join("l1")).expect("link");
    symlink("l1", vol.join("l2")).expect("link");
    assert!(matches!(
        open_in(&vol, Path::new("l1"), true),
        Err(SubPathError::Loop(_))
    ));
}

#[test]
fn nested_and_file_sub_paths() {
    let (_d, vol, _host) = volume();
    let opened = open_in(&vol, Path::new("x/./y/z"), true).expect("nested");
    assert!(opened.is_dir);
    for p in ["x", "x/y", "x/y/z"] {
        assert_eq!(mode(&vol.join(p)), 0o750, "{p}: the volume's mode");
    }
    std::fs::write(vol.join("x/f"), "data").expect("file");
    let opened = open_in(&vol, Path::new("x/f"), true).expect("file");
    assert!(!opened.is_dir, "a file subPath is bound as a file");
    assert!(matches!(
        open_in(&vol, Path::new("x/f/under"), true),
        Err(SubPathError::NotADirectory(p)) if p == Path::new("x/f")
    ));
    assert!(matches!(
        open_in(&vol, Path::new("nope"), false),
        Err(SubPathError::Io { .. })
    ));
}

fn emptydir_pod(mounts: serde_json::Value) -> Pod {
    pod(json!([{"name": "data", "emptyDir": {}}]), mounts)
}

#[tokio::test]
async fn refused_sub_path_is_a_config_error_and_mounts_nothing() {
    let (d, _objects, m) = manager();
    let p = emptydir_pod(json!([
        {"name": "data", "mountPath": "/ok", "subPath": "ok"},
        {"name": "data", "mountPath": "/host", "subPath": "link/verge-should-not-exist"},
    ]));
    let vols = m.prepare(&p).await.expect("prepare");
    let vol = vols.host_path("data").expect("data").to_owned();
    symlink("/", vol.join("link")).expect("link");
    let c = &p.spec.as_ref().expect("spec").containers[0];
    let err = vols.binds_for(c, &[]).await.expect_err("refused");
    assert_eq!(
        verge_runtime::ErrorChain(&err).to_string(),
        "failed to prepare subPath \"link/verge-should-not-exist\" for volumeMount \"data\" \
         of container \"c\": \"link\" is a symlink leading out of the volume; refused"
    );
    assert!(!Path::new("/verge-should-not-exist").exists());
    assert!(
        !d.path().join("pods/u-1/volume-subpaths").exists(),
        "no mount point made: every subPath is checked before any is pinned"
    );
    m.cleanup("u-1").await.expect("cleanup");
}

#[tokio::test]
async fn pin_survives_a_swap_for_a_symlink_and_is_removed_with_the_pod() {
    if !root() {
        eprintln!("skipped: bind mounts need root");
        return;
    }
    let (d, _objects, m) = manager();
    let host = d.path().join("host");
    std::fs::create_dir(&host).expect("host");
    std::fs::write(host.join("secret"), "host file").expect("host file");
    let p = emptydir_pod(json!([{"name": "data", "mountPath": "/s", "subPath": "sub"}]));
    let vols = m.prepare(&p).await.expect("prepare");
    let vol = vols.host_path("data").expect("data").to_owned();
    let c = &p.spec.as_ref().expect("spec").containers[0];
    let binds = vols.binds_for(c, &[]).await.expect("binds");
    let pin = d.path().join("pods/u-1/volume-subpaths/data/c/0");
    assert_eq!(binds, [format!("{}:/s", pin.display())]);
    std::fs::write(vol.join("sub/f"), "in volume").expect("write");
    assert_eq!(read(&pin.join("f")), "in volume", "the pin is the subPath");

    // A container swaps the checked directory for a symlink to the host: the pin still
    // holds the directory that was checked, never the host's.
    std::fs::remove_dir_all(vol.join("sub")).expect("rm");
    symlink(&host, vol.join("sub")).expect("swap");
    assert!(
        !pin.join("secret").exists(),
        "host not reachable through the pin"
    );
    // A restart of the container pins anew, and now refuses.
    assert!(vols.binds_for(c, &[]).await.is_err());

    std::fs::remove_file(vol.join("sub")).expect("rm link");
    vols.binds_for(c, &[]).await.expect("binds again");
    assert!(mounts::first_mount_under(d.path()).is_some());
    m.cleanup("u-1").await.expect("cleanup");
    assert_eq!(mounts::first_mount_under(d.path()), None, "pins unmounted");
    assert!(!d.path().join("pods/u-1").exists());
    assert_eq!(read(&host.join("secret")), "host file", "host untouched");
}

#[tokio::test]
async fn item_paths_out_of_the_volume_are_refused() {
    let (d, objects, m) = manager();
    objects.put_secret(json!({"metadata": {"name": "s", "namespace": "ns"},
        "data": {"k": "aGk="}}));
    for (path, want) in [
        ("../escape", "must not contain '..'"),
        ("/abs", "must be a relative path"),
        ("..x", "must not start with '..'"),
        ("a/../../b", "must not contain '..'"),
    ] {
        let p = pod(
            json!([{"name": "s", "secret": {"secretName": "s",
                "items": [{"key": "k", "path": path}]}}]),
            json!([]),
        );
        let err = m.prepare(&p).await.expect_err(path).to_string();
        assert!(err.contains(want), "{path}: {err}");
    }
    assert!(!d.path().join("pods/u-1/volumes/escape").exists());
    assert!(!d.path().join("escape").exists());
    m.cleanup("u-1").await.expect("cleanup");
}

#[tokio::test]
async fn secret_and_projected_volumes_live_in_memory_in_private_dirs() {
    let (d, objects, m) = manager();
    objects.put_secret(json!({"metadata": {"name": "s", "namespace": "ns"},
        "data": {"k": "aGk="}}));
    let p = pod(
        json!([{"name": "s", "secret": {"secretName": "s"}},
               {"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
               {"name": "c", "configMap": {"name": "gone", "optional": true}}]),
        json!([]),
    );
    let vols = m.prepare(&p).await.expect("prepare");
    assert_eq!(mode(&d.path().join("pods")), 0o700);
    assert_eq!(mode(&d.path().join("pods/u-1")), 0o700);
    let s = vols.host_path("s").expect("s").to_owned();
    assert_eq!(read(&s.join("k")), "hi");
    assert_eq!(mode(&s.join("k")), 0o644, "defaultMode kept");
    let fs_type = |p: &Path| fs_types(p).pop();
    if root() {
        assert_eq!(fs_type(&s).as_deref(), Some("tmpfs"), "secret in memory");
        assert_eq!(mode(&s), 0o755);
        let t = vols.host_path("t").expect("t");
        assert_eq!(fs_type(t).as_deref(), Some("tmpfs"), "projected in memory");
        assert_eq!(
            fs_type(vols.host_path("c").expect("c")),
            None,
            "configMap on disk"
        );
        // Idempotent after an edgecore restart: not mounted twice.
        m.prepare(&p).await.expect("again");
        assert_eq!(fs_types(&s).len(), 1);
    }
    m.cleanup("u-1").await.expect("cleanup");
    assert_eq!(mounts::first_mount_under(d.path()), None);
    assert!(!d.path().join("pods/u-1").exists());
}
