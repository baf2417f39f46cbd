//! Target `config_yaml`: UTF-8 text → `Config::from_yaml` of edgecore, cloudhub and
//! edgecontroller (strict serde YAML through `verge_core::from_yaml`, then each binary's
//! value checks).
//!
//! Properties: nothing panics (no stack overflow on deep nesting, no allocation past
//! libFuzzer's `-rss_limit_mb` on aliases); an edgecore configuration that was accepted
//! writes YAML ([`verge_edgecore::Config::to_yaml`]) that reads back to the same
//! configuration, as that function documents.

/// Parses `data`, when it is UTF-8, as each configuration.
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(config) = verge_edgecore::Config::from_yaml(text, "edgecore.yaml") {
        let yaml = config.to_yaml().expect("an accepted config serializes");
        let again = verge_edgecore::Config::from_yaml(&yaml, "written")
            .unwrap_or_else(|e| panic!("written config does not read back: {e}\n{yaml}"));
        assert_eq!(again, config, "edgecore config round trip\n{yaml}");
    }
    let _ = verge_cloudhub::Config::from_yaml(text, "cloudhub.yaml");
    let _ = verge_edgecontroller::Config::from_yaml(text, "edgecontroller.yaml");
}
