//! Simulated readings: a bounded random walk per property.
//!
//! A property's simulation comes from its visitor `configData` (the keys are this mapper's
//! own; KubeEdge leaves them to each protocol):
//!
//! | key | meaning | default |
//! |---|---|---|
//! | `dataType` | `int`, `float`, `string` or `boolean` | the model property's `type`, else `int` |
//! | `minValue` or `min` | lower bound of the walk | the model's `minimum`, else 0 |
//! | `maxValue` or `max` | upper bound of the walk | the model's `maximum`, else 100 |
//! | `step` | largest change per collection | a tenth of the range (at least 1 for `int`) |
//!
//! `int` and `float` walk in `[min, max]` starting in the middle; `boolean` flips now and
//! then; `string` counts (`virtual-1`, `virtual-2`, ...).

use rand::Rng;

/// The type of a property's value, as reported in the twin's `metadata.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataType {
    /// Whole numbers (`int`, `integer`, `long`).
    Int,
    /// Decimal numbers (`float`, `double`), reported with two decimals.
    Float,
    /// Text.
    String,
    /// `true` / `false` (`boolean`, `bool`).
    Boolean,
}

impl DataType {
    /// Parses a KubeEdge type name, case-insensitively (models say `INT`, visitors `int`).
    pub fn parse(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "int" | "integer" | "int32" | "int64" | "long" => Some(Self::Int),
            "float" | "double" | "number" => Some(Self::Float),
            "string" | "bytes" => Some(Self::String),
            "boolean" | "bool" => Some(Self::Boolean),
            _ => None,
        }
    }

    /// The name reported in `metadata.type`: `int`, `float`, `string` or `boolean`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Int => "int",
            Self::Float => "float",
            Self::String => "string",
            Self::Boolean => "boolean",
        }
    }
}

/// How one property's value moves between collections.
#[derive(Debug, Clone, PartialEq)]
pub struct Simulation {
    /// The value's type.
    pub data_type: DataType,
    /// Lower bound (numbers only).
    pub min: f64,
    /// Upper bound (numbers only); at least `min`.
    pub max: f64,
    /// Largest change per collection (numbers only); positive.
    pub step: f64,
    counter: u64,
}

impl Simulation {
    /// A simulation in `[min, max]` (swapped when reversed); `step` defaults to a tenth of the
    /// range, at least 1 for [`DataType::Int`].
    pub fn new(data_type: DataType, min: f64, max: f64, step: Option<f64>) -> Self {
        let (min, max) = if min <= max { (min, max) } else { (max, min) };
        let mut step = step
            .filter(|s| s.is_finite() && *s > 0.0)
            .unwrap_or((max - min) / 10.0);
        if data_type == DataType::Int {
            step = step.round().max(1.0);
        } else if step <= 0.0 {
            step = 0.1;
        }
        Self {
            data_type,
            min,
            max,
            step,
            counter: 0,
        }
    }

    /// The first reading: the middle of the range, `false`, or `virtual-0`.
    pub fn initial(&self) -> String {
        let middle = self.min + (self.max - self.min) / 2.0;
        match self.data_type {
            DataType::Int => format_int(middle),
            DataType::Float => format!("{middle:.2}"),
            DataType::String => "virtual-0".to_owned(),
            DataType::Boolean => "false".to_owned(),
        }
    }

    /// The reading after `current` (a value that does not parse restarts from
    /// [`Simulation::initial`]).
    pub fn next(&mut self, current: &str, rng: &mut impl Rng) -> String {
        match self.data_type {
            DataType::Int | DataType::Float => {
                let base = current
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite())
                    .unwrap_or_else(|| self.min + (self.max - self.min) / 2.0);
                let delta = rng.random_range(-self.step..=self.step);
                let value = (base + delta).clamp(self.min, self.max);
                if self.data_type == DataType::Int {
                    format_int(value)
                } else {
                    format!("{value:.2}")
                }
            }
            DataType::Boolean => {
                let value = current.trim().eq_ignore_ascii_case("true");
                if rng.random_bool(0.25) { !value } else { value }.to_string()
            }
            DataType::String => {
                self.counter += 1;
                format!("virtual-{}", self.counter)
            }
        }
    }
}

/// `value` rounded to a whole number, as text.
#[allow(clippy::cast_possible_truncation)]
fn format_int(value: f64) -> String {
    (value.round() as i64).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_stay_in_range() {
        let mut rng = rand::rng();
        let mut int = Simulation::new(DataType::Int, 26.0, 18.0, Some(1.0));
        assert_eq!(int.initial(), "22");
        let mut value = int.initial();
        for _ in 0..500 {
            let next = int.next(&value, &mut rng);
            let (a, b) = (value.parse::<i64>(), next.parse::<i64>());
            assert!(
                matches!((a, b), (Ok(a), Ok(b)) if (a - b).abs() <= 1 && (18..=26).contains(&b))
            );
            value = next;
        }
        let mut float = Simulation::new(DataType::Float, -1.0, 1.0, None);
        let mut value = float.initial();
        for _ in 0..500 {
            value = float.next(&value, &mut rng);
            let v: f64 = value.parse().unwrap_or(f64::NAN);
            assert!((-1.0..=1.0).contains(&v), "{value}");
        }
        let restarted: f64 = float.next("garbage", &mut rng).parse().unwrap_or(f64::NAN);
        assert!((-0.2..=0.2).contains(&restarted), "{restarted}");
    }

    #[test]
    fn booleans_strings_and_type_names() {
        let mut rng = rand::rng();
        let mut boolean = Simulation::new(DataType::Boolean, 0.0, 0.0, None);
        assert!(matches!(
            boolean.next("true", &mut rng).as_str(),
            "true" | "false"
        ));
        let mut string = Simulation::new(DataType::String, 0.0, 0.0, None);
        assert_eq!(string.next("", &mut rng), "virtual-1");
        assert_eq!(string.next("", &mut rng), "virtual-2");
        assert_eq!(DataType::parse("INT"), Some(DataType::Int));
        assert_eq!(DataType::parse("Double"), Some(DataType::Float));
        assert_eq!(DataType::parse("map"), None);
        assert_eq!(DataType::Boolean.as_str(), "boolean");
    }
}
