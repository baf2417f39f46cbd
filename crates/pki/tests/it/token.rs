//! Bootstrap tokens against bootstrap-token Secret data.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use verge_pki::token::BOOTSTRAP_TOKEN_SECRET_TYPE;
use verge_pki::{BootstrapToken, TokenError, Usage, validate_token_secret};

const TOKEN: &str = "abcdef.0123456789abcdef";

/// Secret data as `kubeadm token create` writes it (expiring `2100-01-01`).
fn data() -> BTreeMap<String, Vec<u8>> {
    [
        ("token-id", "abcdef"),
        ("token-secret", "0123456789abcdef"),
        ("expiration", "2100-01-01T00:00:00Z"),
        ("usage-bootstrap-authentication", "true"),
        ("usage-bootstrap-signing", "true"),
        (
            "auth-extra-groups",
            "system:bootstrappers:kubeadm:default-node-token",
        ),
        ("description", "test token"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.as_bytes().to_vec()))
    .collect()
}

fn with(key: &str, value: &str) -> BTreeMap<String, Vec<u8>> {
    let mut data = data();
    data.insert(key.to_owned(), value.as_bytes().to_vec());
    data
}

fn check(data: &BTreeMap<String, Vec<u8>>) -> Result<verge_pki::TokenGrant, TokenError> {
    let token = BootstrapToken::parse(TOKEN)?;
    validate_token_secret(
        &token,
        BOOTSTRAP_TOKEN_SECRET_TYPE,
        data,
        SystemTime::now(),
        Usage::Authentication,
    )
}

#[test]
fn tokens_parse_and_never_print_their_secret() -> Result<(), TokenError> {
    let token = BootstrapToken::parse(TOKEN)?;
    assert_eq!(token.id(), "abcdef");
    assert_eq!(token.secret(), "0123456789abcdef");
    assert_eq!(token.secret_name(), "bootstrap-token-abcdef");
    assert_eq!(token.expose().as_str(), TOKEN);
    for shown in [format!("{token:?}"), format!("{token}")] {
        assert!(!shown.contains("0123456789abcdef"), "{shown}");
        assert!(shown.contains("abcdef"), "{shown}");
    }
    for bad in [
        "",
        "abcdef",
        "abcdef.",
        "ABCDEF.0123456789abcdef",
        "abcde.0123456789abcdef",
        "abcdef.0123456789abcde",
        "abcdef.0123456789abcdef0",
        "abcdef:0123456789abcdef",
        "abcdef.0123456789abcdeF",
    ] {
        let err = BootstrapToken::parse(bad).err();
        assert!(matches!(err, Some(TokenError::Malformed { .. })), "{bad}");
        assert!(
            !err.map(|e| e.to_string())
                .unwrap_or_default()
                .contains("0123456789"),
            "{bad}"
        );
    }
    let generated = BootstrapToken::generate();
    assert_eq!(BootstrapToken::parse(&generated.expose())?, generated);
    Ok(())
}

#[test]
fn a_valid_token_grants_the_bootstrap_user_and_groups() -> Result<(), TokenError> {
    let grant = check(&data())?;
    assert_eq!(grant.user, "system:bootstrap:abcdef");
    assert_eq!(
        grant.groups,
        [
            "system:bootstrappers",
            "system:bootstrappers:kubeadm:default-node-token"
        ]
    );
    assert!(grant.expiration.is_some());
    // No expiration and no extra groups are fine too.
    let mut minimal = data();
    minimal.remove("expiration");
    minimal.remove("auth-extra-groups");
    let grant = check(&minimal)?;
    assert_eq!((grant.groups.len(), grant.expiration), (1, None));
    // Signing usage is asked for separately.
    let token = BootstrapToken::parse(TOKEN)?;
    let signing = with("usage-bootstrap-signing", "false");
    assert!(matches!(
        validate_token_secret(
            &token,
            BOOTSTRAP_TOKEN_SECRET_TYPE,
            &signing,
            SystemTime::now(),
            Usage::Signing
        ),
        Err(TokenError::WrongUsage {
            key: "usage-bootstrap-signing",
            ..
        })
    ));
    Ok(())
}

#[test]
fn every_refusal_has_its_own_error() -> Result<(), TokenError> {
    let token = BootstrapToken::parse(TOKEN)?;
    let now = SystemTime::now();
    assert!(matches!(
        validate_token_secret(&token, "Opaque", &data(), now, Usage::Authentication),
        Err(TokenError::Unknown { .. })
    ));
    assert!(matches!(
        check(&with("token-secret", "0123456789abcdee")),
        Err(TokenError::Mismatch { .. })
    ));
    assert!(matches!(
        check(&with("token-id", "abcdeg")),
        Err(TokenError::Mismatch { .. })
    ));
    let mut no_secret = data();
    no_secret.remove("token-secret");
    assert!(matches!(
        check(&no_secret),
        Err(TokenError::Malformed { .. })
    ));
    assert!(matches!(
        check(&with("expiration", "tomorrow")),
        Err(TokenError::Malformed { .. })
    ));

    let expired = check(&with("expiration", "2020-09-13T04:39:10Z"));
    match &expired {
        Err(TokenError::Expired { expired_at, .. }) => {
            assert_eq!(
                *expired_at,
                SystemTime::UNIX_EPOCH + Duration::from_secs(1_599_971_950)
            );
        }
        other => panic!("expected Expired, got {other:?}"),
    }
    let message = expired.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        message.contains("expired at 2020-09-13T04:39:10Z"),
        "{message}"
    );
    // Offsets other than Z are understood.
    assert!(matches!(
        check(&with("expiration", "2020-09-13T06:39:10+02:00")),
        Err(TokenError::Expired { .. })
    ));

    assert!(matches!(
        check(&with("usage-bootstrap-authentication", "false")),
        Err(TokenError::WrongUsage { .. })
    ));
    let mut no_usage = data();
    no_usage.remove("usage-bootstrap-authentication");
    assert!(matches!(
        check(&no_usage),
        Err(TokenError::WrongUsage { .. })
    ));

    for bad in [
        "system:masters",
        "system:bootstrappers:",
        "system:bootstrappers:Upper",
        "system:bootstrappers:a-",
        "system:bootstrappers:a,system:nodes",
        "system:bootstrappers:a,",
    ] {
        assert!(
            matches!(
                check(&with("auth-extra-groups", bad)),
                Err(TokenError::BadGroups { .. })
            ),
            "{bad}"
        );
    }
    let grant = check(&with(
        "auth-extra-groups",
        "system:bootstrappers:a,system:bootstrappers:b:c-1",
    ))?;
    assert_eq!(grant.groups.len(), 3);
    Ok(())
}

#[test]
fn errors_read_well_and_hide_the_secret() {
    let errors = [
        check(&with("token-secret", "0123456789abcdee")).err(),
        check(&with("usage-bootstrap-authentication", "no")).err(),
        check(&with("auth-extra-groups", "system:masters")).err(),
    ];
    for error in errors.into_iter().flatten() {
        let text = error.to_string();
        assert!(text.contains("\"abcdef\""), "{text}");
        assert!(!text.contains("0123456789abcdef"), "{text}");
    }
}
