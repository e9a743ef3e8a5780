//! Prices in USD per million tokens, and the cost of a reply.

use super::Usage;

/// A model's price, USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    /// Cached input; the full input price when the provider reports no cache discount.
    pub cached_input: Option<f64>,
}

impl Price {
    /// Parses `INPUT,OUTPUT[,CACHED_INPUT]` (USD per million tokens).
    pub fn parse(text: &str) -> Result<Price, String> {
        let parts: Vec<&str> = text.split(',').map(str::trim).collect();
        let number = |part: &str| {
            part.parse::<f64>()
                .ok()
                .filter(|value| value.is_finite() && *value >= 0.0)
                .ok_or_else(|| format!("`{part}` is not a price (USD per million tokens)"))
        };
        match parts.as_slice() {
            [input, output] => Ok(Price {
                input: number(input)?,
                output: number(output)?,
                cached_input: None,
            }),
            [input, output, cached] => Ok(Price {
                input: number(input)?,
                output: number(output)?,
                cached_input: Some(number(cached)?),
            }),
            _ => Err(format!(
                "`{text}`: expected INPUT,OUTPUT[,CACHED_INPUT] in USD per million tokens"
            )),
        }
    }

    /// The cost of one reply's usage.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let cached = self.cached_input.unwrap_or(self.input);
        (usage.input_tokens as f64 * self.input
            + usage.cached_input_tokens as f64 * cached
            + usage.cache_write_tokens as f64 * self.input * 1.25
            + usage.output_tokens as f64 * self.output)
            / 1e6
    }
}

/// Built-in list prices, as the vendors published them; override with `--price` when they
/// change. A model missing here has an unknown cost.
pub fn builtin(provider: &str, name: &str) -> Option<Price> {
    let price = |input, output, cached| {
        Some(Price {
            input,
            output,
            cached_input: Some(cached),
        })
    };
    match (provider, name) {
        // The seed harness's model and price.
        ("openai", "gpt-6-luna") => Some(Price {
            input: 0.10,
            output: 0.50,
            cached_input: None,
        }),
        ("openai", "gpt-5") => price(1.25, 10.0, 0.125),
        ("openai", "gpt-5-mini") => price(0.25, 2.0, 0.025),
        ("openai", "gpt-5-nano") => price(0.05, 0.40, 0.005),
        ("openai", "gpt-4.1") => price(2.0, 8.0, 0.50),
        ("openai", "gpt-4.1-mini") => price(0.40, 1.60, 0.10),
        ("openai", "gpt-4o") => price(2.50, 10.0, 1.25),
        ("openai", "gpt-4o-mini") => price(0.15, 0.60, 0.075),
        ("anthropic", "claude-opus-4-1") => price(15.0, 75.0, 1.50),
        ("anthropic", "claude-sonnet-4-5") => price(3.0, 15.0, 0.30),
        ("anthropic", "claude-haiku-4-5") => price(1.0, 5.0, 0.10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_counts_cached_and_written_tokens() {
        let price = Price {
            input: 2.0,
            output: 10.0,
            cached_input: Some(0.5),
        };
        let usage = Usage {
            input_tokens: 1_000_000,
            cached_input_tokens: 2_000_000,
            cache_write_tokens: 400_000,
            output_tokens: 100_000,
        };
        assert!((price.cost(&usage) - (2.0 + 1.0 + 1.0 + 1.0)).abs() < 1e-9);
    }

    #[test]
    fn parse_names_what_is_wrong() {
        assert_eq!(
            Price::parse("1,2").unwrap(),
            Price {
                input: 1.0,
                output: 2.0,
                cached_input: None
            }
        );
        assert_eq!(Price::parse("1, 2, 0.1").unwrap().cached_input, Some(0.1));
        assert_eq!(
            Price::parse("1").unwrap_err(),
            "`1`: expected INPUT,OUTPUT[,CACHED_INPUT] in USD per million tokens"
        );
        assert_eq!(
            Price::parse("1,x").unwrap_err(),
            "`x` is not a price (USD per million tokens)"
        );
    }
}
