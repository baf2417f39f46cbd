//! [`TracingConfig`]: the `tracing` section of every binary's YAML configuration.

use serde::{Deserialize, Serialize};

use crate::TelemetryError;

/// Where and how much to trace; the `tracing` section of cloudhub's, edgecontroller's,
/// devicecontroller's and edgecore's configuration.
///
/// ```yaml
/// tracing:
///   otlpEndpoint: http://127.0.0.1:4317   # absent/null: no export (the default)
///   samplingRatio: 1.0                    # 0.0..=1.0, parent-based; default 1.0
/// ```
///
/// With no endpoint no OpenTelemetry layer is installed at all, so tracing costs nothing
/// beyond the `tracing` spans the code creates for its logs anyway.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct TracingConfig {
    /// The OTLP/gRPC endpoint spans are exported to (a collector, or Jaeger's all-in-one
    /// which accepts OTLP on 4317), e.g. `http://127.0.0.1:4317`. Default none: export off.
    pub otlp_endpoint: Option<String>,
    /// The share of new traces that are sampled. See [`SamplingRatio`]. Default 1.0.
    pub sampling_ratio: SamplingRatio,
}

impl TracingConfig {
    /// Export to `endpoint`, sampling every trace (what tests and `--otlp-endpoint` use).
    pub fn to_endpoint(endpoint: impl Into<String>) -> Self {
        Self {
            otlp_endpoint: Some(endpoint.into()),
            sampling_ratio: SamplingRatio::default(),
        }
    }

    /// Whether spans are exported (an endpoint is set).
    pub fn is_enabled(&self) -> bool {
        self.otlp_endpoint.is_some()
    }
}

/// The probability in `0.0..=1.0` that a trace begun in this process is sampled
/// (OpenTelemetry's `TraceIdRatioBased` sampler). It sits behind a parent-based sampler, as
/// the OpenTelemetry specification's default does: a span with a parent (local, or remote
/// through a Message's `traceparent`) follows its parent's decision, so a trace is either
/// whole or absent across processes. Default 1.0 (every trace).
///
/// Deserialises from a number; a value outside `0.0..=1.0` (or NaN) is a configuration
/// error naming the field.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(try_from = "f64", into = "f64")]
pub struct SamplingRatio(f64);

// NaN is refused by `SamplingRatio::new`, so equality is reflexive.
impl Eq for SamplingRatio {}

impl SamplingRatio {
    /// `ratio` if it lies in `0.0..=1.0`.
    ///
    /// # Errors
    /// [`TelemetryError::SamplingRatio`] for a value outside the range or NaN.
    pub fn new(ratio: f64) -> Result<Self, TelemetryError> {
        if (0.0..=1.0).contains(&ratio) {
            Ok(Self(ratio))
        } else {
            Err(TelemetryError::SamplingRatio(ratio))
        }
    }

    /// The ratio, in `0.0..=1.0`.
    pub fn get(self) -> f64 {
        self.0
    }
}

impl Default for SamplingRatio {
    fn default() -> Self {
        Self(1.0)
    }
}

impl From<SamplingRatio> for f64 {
    fn from(ratio: SamplingRatio) -> Self {
        ratio.0
    }
}

impl TryFrom<f64> for SamplingRatio {
    type Error = TelemetryError;

    fn try_from(ratio: f64) -> Result<Self, Self::Error> {
        Self::new(ratio)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    struct Binary {
        tracing: TracingConfig,
    }

    fn parse(text: &str) -> Result<Binary, verge_core::ConfigError> {
        verge_core::from_yaml(text, "test.yaml")
    }

    #[test]
    fn defaults_to_off_with_ratio_one() {
        let config = parse("tracing: {}\n").expect("parses");
        assert_eq!(config.tracing, TracingConfig::default());
        assert!(!config.tracing.is_enabled());
        assert!((config.tracing.sampling_ratio.get() - 1.0).abs() < f64::EPSILON);
        let absent = parse("# nothing\n").expect("parses");
        assert!(!absent.tracing.is_enabled());
        let null = parse("tracing:\n  otlpEndpoint: null\n").expect("parses");
        assert!(!null.tracing.is_enabled());
    }

    #[test]
    fn parses_endpoint_and_ratio() {
        let config =
            parse("tracing:\n  otlpEndpoint: http://127.0.0.1:4317\n  samplingRatio: 0.25\n")
                .expect("parses");
        assert_eq!(
            config.tracing.otlp_endpoint.as_deref(),
            Some("http://127.0.0.1:4317")
        );
        assert!((config.tracing.sampling_ratio.get() - 0.25).abs() < f64::EPSILON);
        let zero = parse("tracing:\n  samplingRatio: 0\n").expect("an integer ratio parses");
        assert!(zero.tracing.sampling_ratio.get().abs() < f64::EPSILON);
    }

    #[test]
    fn refuses_ratio_out_of_range_and_unknown_fields() {
        for bad in ["1.5", "-0.1", ".nan"] {
            let error =
                parse(&format!("tracing:\n  samplingRatio: {bad}\n")).expect_err("out of range");
            assert!(
                error.message.contains("samplingRatio") && error.message.contains("0.0..=1.0"),
                "{bad}: {error}"
            );
        }
        let error = parse("tracing:\n  otlpEndpont: x\n").expect_err("unknown field");
        assert!(error.message.contains("otlpEndpont"), "{error}");
        assert!(SamplingRatio::new(2.0).is_err());
        assert!(SamplingRatio::new(0.5).is_ok());
    }
}
