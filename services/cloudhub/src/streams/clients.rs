//! Who may CONNECT: each client name is accepted only from the CA meant to issue it. The
//! listener's TLS trusts two kinds of roots at once (rustls accepts a chain to any of them),
//! so the name alone would let one CA's holder pose as the other's: a certificate named
//! after a replica from the API server's client CA would get a replica's forwarding
//! rights, and one named `kube-apiserver-egress` from the Verge CA would act as the API
//! server.

use rustls::pki_types::CertificateDer;
use verge_pki::{CertInfo, issued_by};

use super::PEER_NAME;

/// A CONNECT client the listener accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Client {
    /// The certificate's common name.
    pub name: String,
    /// Whether it is another cloudhub replica forwarding a CONNECT (which is answered only
    /// from this replica's own sessions).
    pub peer: bool,
}

/// The names each CA may vouch for.
#[derive(Debug, Clone)]
pub(crate) struct ClientTrust {
    /// The Verge CA: it issues the replicas' peer certificates ([`PEER_NAME`]).
    verge_ca: CertificateDer<'static>,
    /// `streams.clientCaFile`: it issues the API server's egress client certificate.
    egress_cas: Vec<CertificateDer<'static>>,
    /// `streams.clientNames`: the names accepted from `egress_cas`.
    egress_names: Vec<String>,
}

impl ClientTrust {
    /// Replicas from `verge_ca`, `egress_names` from `egress_cas`.
    pub fn new(
        verge_ca: CertificateDer<'static>,
        egress_cas: Vec<CertificateDer<'static>>,
        egress_names: Vec<String>,
    ) -> Self {
        Self {
            verge_ca,
            egress_cas,
            egress_names,
        }
    }

    /// The client whose verified certificate chain (leaf first, as the TLS layer presents
    /// it) is `chain`, or `None` when the leaf's name is not one its CA may vouch for:
    /// [`PEER_NAME`] only from the Verge CA, a name of `streams.clientNames` only from a CA
    /// of `streams.clientCaFile` (directly or through intermediates the client sent).
    pub fn identify(&self, chain: &[CertificateDer<'_>]) -> Option<Client> {
        let leaf = chain.first()?;
        let name = CertInfo::parse_der(leaf)
            .ok()?
            .common_name()
            .map(str::to_owned)?;
        if name == PEER_NAME {
            return chains_to(chain, std::slice::from_ref(&self.verge_ca))
                .then_some(Client { name, peer: true });
        }
        (self.egress_names.contains(&name) && chains_to(chain, &self.egress_cas))
            .then_some(Client { name, peer: false })
    }
}

/// Whether `chain` (leaf first) leads to one of `cas`: some certificate of it is issued by
/// one of `cas` and every certificate before it by the next one.
fn chains_to(chain: &[CertificateDer<'_>], cas: &[CertificateDer<'static>]) -> bool {
    let cas = || cas.iter().map(AsRef::as_ref);
    chain.iter().enumerate().any(|(at, cert)| {
        issued_by(cert, cas())
            && chain[..=at]
                .windows(2)
                .all(|pair| issued_by(&pair[0], [pair[1].as_ref()]))
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use verge_pki::Ca;
    use verge_pki::pem_io::cert_from_pem;

    use super::*;

    const EGRESS: &str = "kube-apiserver-egress";

    fn leaf(ca: &Ca, name: &str) -> Vec<CertificateDer<'static>> {
        let cert = ca
            .issue_client(name, None, Duration::from_secs(3600))
            .expect("issue");
        vec![cert_from_pem(&cert.cert_pem).expect("der")]
    }

    /// The attack: a certificate of the API server's client CA (which also issues every
    /// kubelet's and many users' client certificates) named after a replica, or one of the
    /// Verge CA named after the API server's egress client.
    #[test]
    fn each_name_is_accepted_only_from_its_own_ca() {
        let day = Duration::from_secs(86_400);
        let verge = Ca::generate("verge-ca", day).expect("verge ca");
        let cluster = Ca::generate("kubernetes", day).expect("cluster ca");
        let trust = ClientTrust::new(
            verge.cert_der().clone(),
            vec![cluster.cert_der().clone()],
            vec![EGRESS.to_owned()],
        );
        assert_eq!(
            trust.identify(&leaf(&verge, PEER_NAME)),
            Some(Client {
                name: PEER_NAME.to_owned(),
                peer: true
            })
        );
        assert_eq!(
            trust.identify(&leaf(&cluster, EGRESS)),
            Some(Client {
                name: EGRESS.to_owned(),
                peer: false
            })
        );
        assert_eq!(trust.identify(&leaf(&cluster, PEER_NAME)), None);
        assert_eq!(trust.identify(&leaf(&verge, EGRESS)), None);
        assert_eq!(trust.identify(&leaf(&cluster, "system:node:edge-1")), None);
        assert_eq!(trust.identify(&[]), None);
    }

    #[test]
    fn without_a_client_ca_only_replicas_connect() {
        let day = Duration::from_secs(86_400);
        let verge = Ca::generate("verge-ca", day).expect("verge ca");
        let trust = ClientTrust::new(
            verge.cert_der().clone(),
            Vec::new(),
            vec![EGRESS.to_owned()],
        );
        assert_eq!(trust.identify(&leaf(&verge, EGRESS)), None);
        assert!(trust.identify(&leaf(&verge, PEER_NAME)).is_some());
    }
}
