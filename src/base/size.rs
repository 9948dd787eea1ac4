//! Human-readable byte sizes: parsing `--arena-size 64MiB` and printing reports.

use std::fmt;
use std::str::FromStr;

/// A number of bytes that prints as `1.5 MiB` and parses from `64MiB`,
/// `2GiB`, `512KB`, `1000000` (plain bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub usize);

/// Text that is not a size [`ByteSize`] reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot read {input:?} as a size: {reason} (examples: 64MiB, 2GiB, 512KB, 1048576)")]
pub struct SizeParseError {
    /// The text given.
    pub input: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl FromStr for ByteSize {
    type Err = SizeParseError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let err = |reason| SizeParseError {
            input: input.to_string(),
            reason,
        };
        let trimmed = input.trim();
        let split = trimmed
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(trimmed.len());
        let (number, unit) = trimmed.split_at(split);
        if number.is_empty() {
            return Err(err("no number"));
        }
        let value: f64 = number.parse().map_err(|_| err("not a number"))?;
        let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1.0,
            "k" | "kb" => 1e3,
            "m" | "mb" => 1e6,
            "g" | "gb" => 1e9,
            "t" | "tb" => 1e12,
            "kib" => 1024.0,
            "mib" => 1024.0 * 1024.0,
            "gib" => 1024.0 * 1024.0 * 1024.0,
            "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
            _ => return Err(err("unknown unit (use B, KB, MB, GB, KiB, MiB, GiB)")),
        };
        // A plain number counts bytes: `0.9` is far more likely a fraction
        // of something else (a budget as a share of the step) than 1 byte.
        if scale == 1.0 && value.fract() != 0.0 {
            return Err(err(
                "a plain number counts bytes, and this is a fraction of one: give a unit (0.5GiB, 1.5MB)",
            ));
        }
        let bytes = value * scale;
        if !bytes.is_finite() || bytes >= usize::MAX as f64 {
            return Err(err("too large"));
        }
        Ok(ByteSize(bytes.round() as usize))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
        let mut value = self.0 as f64;
        let mut unit = 0;
        while value >= 1024.0 && unit + 1 < UNITS.len() {
            value /= 1024.0;
            unit += 1;
        }
        if unit == 0 {
            write!(f, "{} B", self.0)
        } else {
            write!(f, "{value:.2} {}", UNITS[unit])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_binary_and_decimal_units() {
        assert_eq!("64MiB".parse::<ByteSize>().unwrap().0, 64 << 20);
        assert_eq!("2GiB".parse::<ByteSize>().unwrap().0, 2 << 30);
        assert_eq!("512KB".parse::<ByteSize>().unwrap().0, 512_000);
        assert_eq!("1.5 MiB".parse::<ByteSize>().unwrap().0, 1_572_864);
        assert_eq!("4096".parse::<ByteSize>().unwrap().0, 4096);
    }

    #[test]
    fn rejects_garbage_with_a_reason() {
        assert_eq!("lots".parse::<ByteSize>().unwrap_err().reason, "no number");
        assert!("12 parsecs"
            .parse::<ByteSize>()
            .unwrap_err()
            .reason
            .starts_with("unknown unit"));
        for fraction in ["0.9", "1.5", "2.5B"] {
            let why = fraction.parse::<ByteSize>().unwrap_err().reason;
            assert!(why.contains("fraction of one"), "{fraction}: {why}");
        }
        assert_eq!("2.0".parse::<ByteSize>().unwrap().0, 2);
        assert_eq!(
            "1e400".parse::<ByteSize>().unwrap_err().reason,
            "unknown unit (use B, KB, MB, GB, KiB, MiB, GiB)"
        );
    }

    #[test]
    fn prints_in_binary_units() {
        assert_eq!(ByteSize(100).to_string(), "100 B");
        assert_eq!(ByteSize(3 << 20).to_string(), "3.00 MiB");
    }
}
