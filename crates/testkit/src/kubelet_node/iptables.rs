//! The node's iptables rules: the `FORWARD` accept chain it installs, and removing every
//! chain the node's components leave behind, with `iptables-save` and
//! `iptables-restore --noflush` (whose parser handles the quoting of saved rules).

use std::io::Write as _;
use std::process::{Command, Stdio};

use anyhow::{Context as _, bail};

use super::{CLUSTER_CIDR, CNI_NETWORK};

/// The chain, jumped to first from `filter FORWARD`, that accepts pod traffic (Docker sets
/// the `FORWARD` policy to `DROP`, and bridged pod-to-pod packets traverse it).
pub(super) const FORWARD_CHAIN: &str = "VERGE-NODE-FORWARD";

/// The tables the cleanup looks at.
const TABLES: &[&str] = &["filter", "nat", "mangle", "raw"];

/// Whether chain `name` belongs to the node: the kit's own (`VERGE-NODE-`), the kubelet's
/// and kube-proxy's (`KUBE-`; one node per host, so any is this node's) and the CNI portmap
/// plugin's (`CNI-HOSTPORT-`, `CNI-DN-`).
pub(super) fn chain_is_ours(name: &str) -> bool {
    ["VERGE-NODE-", "KUBE-", "CNI-HOSTPORT-", "CNI-DN-"]
        .iter()
        .any(|p| name.starts_with(p))
}

/// Whether a saved rule belongs to the node although its chain does not: CNI rules carry
/// the network name in their comment.
fn rule_is_ours(rule: &str) -> bool {
    rule.contains(CNI_NETWORK)
}

/// From `iptables-save -t <table>` output, the `iptables-restore --noflush` input that
/// deletes every rule of another chain that jumps to one of ours or is ours by
/// [`rule_is_ours`], then flushes and deletes our (user-defined) chains. `None` when there
/// is nothing to remove.
pub(super) fn plan(table: &str, save: &str) -> Option<String> {
    let mut ours = Vec::new();
    let mut deletes = Vec::new();
    for line in save.lines() {
        if let Some(decl) = line.strip_prefix(':') {
            let mut parts = decl.split_whitespace();
            if let (Some(name), Some("-")) = (parts.next(), parts.next())
                && chain_is_ours(name)
            {
                ours.push(name.to_owned());
            }
        } else if let Some(rule) = line.strip_prefix("-A ") {
            let Some((chain, spec)) = rule.split_once(' ') else {
                continue;
            };
            if chain_is_ours(chain) {
                continue;
            }
            if target(spec).is_some_and(chain_is_ours) || rule_is_ours(spec) {
                deletes.push(format!("-D {chain} {spec}"));
            }
        }
    }
    if ours.is_empty() && deletes.is_empty() {
        return None;
    }
    let mut out = format!("*{table}\n");
    for d in deletes {
        out.push_str(&d);
        out.push('\n');
    }
    for c in &ours {
        out.push_str(&format!("-F {c}\n"));
    }
    for c in &ours {
        out.push_str(&format!("-X {c}\n"));
    }
    out.push_str("COMMIT\n");
    Some(out)
}

/// The chain a saved rule jumps or goes to (`-j X` / `-g X`).
fn target(spec: &str) -> Option<&str> {
    let mut words = spec.split_whitespace();
    while let Some(w) = words.next() {
        if w == "-j" || w == "-g" {
            return words.next();
        }
    }
    None
}

/// `<program> <args>` with `stdin`; its stdout.
fn run(program: &str, args: &[&str], stdin: Option<&str>) -> anyhow::Result<String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {program}"))?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input.as_bytes())
            .with_context(|| format!("writing to {program}"))?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "{program} {} failed: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim(),
            stdin.map(|s| format!("\ninput:\n{s}")).unwrap_or_default()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Removes the node's chains and rules ([`plan`]) from every table of iptables and
/// ip6tables. Returns the number of restore scripts applied.
///
/// # Errors
/// `iptables-restore` rejects a plan (the error holds its input).
pub(super) fn remove_ours() -> anyhow::Result<usize> {
    let mut applied = 0;
    for family in ["iptables", "ip6tables"] {
        for table in TABLES {
            // A table the kernel lacks (e.g. no IPv6 raw) cannot be saved: nothing to do.
            let Ok(save) = run(&format!("{family}-save"), &["-t", table], None) else {
                continue;
            };
            if let Some(script) = plan(table, &save) {
                run(&format!("{family}-restore"), &["--noflush"], Some(&script))?;
                applied += 1;
            }
        }
    }
    Ok(applied)
}

/// Installs [`FORWARD_CHAIN`]: accept packets from and to [`CLUSTER_CIDR`], jumped to first
/// from `FORWARD`.
///
/// # Errors
/// `iptables-restore` fails.
pub(super) fn install_forward_chain() -> anyhow::Result<()> {
    let script = format!(
        "*filter\n\
         :{FORWARD_CHAIN} - [0:0]\n\
         -A {FORWARD_CHAIN} -s {CLUSTER_CIDR} -m comment --comment \"verge kubelet node: from pods\" -j ACCEPT\n\
         -A {FORWARD_CHAIN} -d {CLUSTER_CIDR} -m comment --comment \"verge kubelet node: to pods\" -j ACCEPT\n\
         -I FORWARD 1 -j {FORWARD_CHAIN}\n\
         COMMIT\n"
    );
    run("iptables-restore", &["--noflush"], Some(&script)).map(|_| ())
}

/// The names of the node's chains still present in any table of iptables (for checks).
///
/// # Errors
/// `iptables-save` fails.
pub(super) fn our_chains() -> anyhow::Result<Vec<String>> {
    let save = run("iptables-save", &[], None)?;
    Ok(save
        .lines()
        .filter_map(|l| l.strip_prefix(':'))
        .filter_map(|d| d.split_whitespace().next())
        .filter(|n| chain_is_ours(n))
        .map(str::to_owned)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAVED: &str = r#"# Generated by iptables-nft-save v1.8.9 (nf_tables)
*nat
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:DOCKER - [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-SVC-NPX46M4PTMTKRN6Y - [0:0]
:CNI-HOSTPORT-DNAT - [0:0]
-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
-A POSTROUTING -s 10.244.0.5/32 -m comment --comment "name: \"verge-pods\" id: \"abc\"" -j MASQUERADE
-A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE
-A KUBE-SERVICES -d 10.96.0.1/32 -p tcp -j KUBE-SVC-NPX46M4PTMTKRN6Y
COMMIT
"#;

    #[test]
    fn plan_removes_our_chains_and_the_jumps_to_them_only() {
        let plan = plan("nat", SAVED).expect("something to remove");
        assert_eq!(
            plan,
            "*nat\n\
             -D PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
             -D OUTPUT -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT\n\
             -D POSTROUTING -s 10.244.0.5/32 -m comment --comment \"name: \\\"verge-pods\\\" id: \\\"abc\\\"\" -j MASQUERADE\n\
             -F KUBE-SERVICES\n-F KUBE-SVC-NPX46M4PTMTKRN6Y\n-F CNI-HOSTPORT-DNAT\n\
             -X KUBE-SERVICES\n-X KUBE-SVC-NPX46M4PTMTKRN6Y\n-X CNI-HOSTPORT-DNAT\n\
             COMMIT\n"
        );
        assert!(!plan.contains("DOCKER"), "Docker's rules stay");
    }

    #[test]
    fn nothing_to_remove_gives_no_plan() {
        let docker_only =
            "*filter\n:FORWARD DROP [0:0]\n:DOCKER - [0:0]\n-A FORWARD -j DOCKER\nCOMMIT\n";
        assert_eq!(plan("filter", docker_only), None);
    }
}
