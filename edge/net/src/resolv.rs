//! resolv.conf files: parsing and writing them ([`ResolvConf`]) and reading the node's own
//! ([`node`]), shared by edged (each pod's file, the kubelet's rules) and the cluster
//! resolver (where it relays names outside the cluster).

/// A host on systemd-resolved lists its stub `127.0.0.53` in `/etc/resolv.conf`, which pods
/// cannot reach; its real upstreams are in this file (Docker and the kubelet read it too).
pub const SYSTEMD_RESOLVED: &str = "/run/systemd/resolve/resolv.conf";

/// The usual place.
pub const ETC_RESOLV_CONF: &str = "/etc/resolv.conf";

/// A parsed resolv.conf.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResolvConf {
    /// `nameserver` lines.
    pub nameservers: Vec<String>,
    /// The `search` domains.
    pub searches: Vec<String>,
    /// The `options`, `name` or `name:value`.
    pub options: Vec<String>,
}

impl ResolvConf {
    /// Parses the text of a resolv.conf (`domain` counts as a search domain; comments and
    /// other lines are skipped).
    pub fn parse(text: &str) -> Self {
        let mut out = Self::default();
        for line in text.lines() {
            let mut words = line.split_whitespace();
            match words.next() {
                Some("nameserver") => out.nameservers.extend(words.next().map(str::to_owned)),
                Some("search" | "domain") => {
                    out.searches = words.map(str::to_owned).collect();
                }
                Some("options") => out.options.extend(words.map(str::to_owned)),
                _ => {}
            }
        }
        out
    }

    /// The file's text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if !self.searches.is_empty() {
            out.push_str(&format!("search {}\n", self.searches.join(" ")));
        }
        for ns in &self.nameservers {
            out.push_str(&format!("nameserver {ns}\n"));
        }
        if !self.options.is_empty() {
            out.push_str(&format!("options {}\n", self.options.join(" ")));
        }
        out
    }
}

/// The node's own resolv.conf: systemd-resolved's upstream file ([`SYSTEMD_RESOLVED`]) when
/// there is one, else [`ETC_RESOLV_CONF`]; empty when neither can be read.
pub fn node() -> ResolvConf {
    let text = std::fs::read_to_string(SYSTEMD_RESOLVED)
        .or_else(|_| std::fs::read_to_string(ETC_RESOLV_CONF))
        .unwrap_or_default();
    ResolvConf::parse(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_render_round_trip() {
        let conf = ResolvConf::parse(
            "# comment\nnameserver 192.0.2.53\nsearch a.example b.example\noptions ndots:2 edns0\n",
        );
        assert_eq!(conf.nameservers, ["192.0.2.53"]);
        assert_eq!(conf.searches, ["a.example", "b.example"]);
        assert_eq!(ResolvConf::parse(&conf.render()), conf);
    }
}
