//! The Serving card's inputs as typed (kept when invalid), and the runs
//! they ask for.

/// The Serving card's inputs, as typed (kept when invalid).
#[derive(Debug, Clone, PartialEq)]
pub struct ServeForm {
    pub rates: String,
    pub chunks: String,
    pub policy: String,
    pub duration: String,
    pub warmup: String,
    pub seed: String,
    pub timeout: String,
    pub queue_limit: String,
    pub slo: String,
}

impl Default for ServeForm {
    fn default() -> Self {
        ServeForm {
            // The browser study's settings (tests/e2e/serve-browser.mjs):
            // a rate a 2-core machine's browser sustains, and an SLO above
            // its slowest unloaded decide (a 1,024-token one takes several
            // seconds there).
            rates: "0.05".into(),
            chunks: "whole".into(),
            policy: "fcfs".into(),
            duration: "120".into(),
            warmup: "10".into(),
            seed: "1".into(),
            timeout: "30000".into(),
            queue_limit: "16".into(),
            slo: "20000".into(),
        }
    }
}

/// Most runs one Serving request may ask for (each runs in real time).
const MAX_SERVE_RUNS: usize = 24;

impl ServeForm {
    /// The runs these inputs ask for (rates × chunks × policies), or the
    /// first problem, naming the field.
    pub fn runs(&self) -> Result<Vec<serving::ServeSettings>, String> {
        use serving::{Policy, ServeSettings};
        fn number(text: &str, field: &str) -> Result<f64, String> {
            text.trim().parse::<f64>().map_err(|_| format!("{field}: `{}` is not a number", text.trim()))
        }
        let list = |text: &str| text.split(',').map(str::trim).filter(|t| !t.is_empty()).map(String::from).collect::<Vec<_>>();
        let rates = list(&self.rates).iter().map(|r| number(r, "rates")).collect::<Result<Vec<_>, _>>()?;
        let chunks = list(&self.chunks)
            .iter()
            .map(|c| match c.as_str() {
                "whole" | "none" => Ok(None),
                n => n
                    .parse::<usize>()
                    .ok()
                    .filter(|&n| n > 0)
                    .map(Some)
                    .ok_or_else(|| format!("chunks: `{n}` is not a number of tokens or `whole`")),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let policies = match self.policy.as_str() {
            "both" => Policy::ALL.to_vec(),
            p => vec![Policy::parse(p).map_err(|e| e.to_string())?],
        };
        if rates.is_empty() || chunks.is_empty() {
            return Err("rates and chunks: give at least one value each".into());
        }
        let queue_limit = self
            .queue_limit
            .trim()
            .parse::<usize>()
            .map_err(|_| format!("queue limit: `{}` is not a whole number", self.queue_limit.trim()))?;
        let seed = self.seed.trim().parse::<u64>().map_err(|_| format!("seed: `{}` is not a whole number", self.seed.trim()))?;
        let base = ServeSettings {
            duration_s: number(&self.duration, "duration")?,
            warmup_s: number(&self.warmup, "warm-up")?,
            timeout_ms: number(&self.timeout, "timeout")?,
            drain_s: number(&self.timeout, "timeout")? / 1000.0,
            slo_ms: number(&self.slo, "SLO")?,
            queue_limit,
            seed,
            ..ServeSettings::default()
        };
        let mut runs = Vec::new();
        for &rate in &rates {
            for &chunk in &chunks {
                for &policy in &policies {
                    let settings = ServeSettings { rate_per_s: rate, chunk, policy, ..base.clone() };
                    settings.check().map_err(|e| e.to_string())?;
                    runs.push(settings);
                }
            }
        }
        if runs.len() > MAX_SERVE_RUNS {
            return Err(format!("{} runs asked (rates × chunks × policies); at most {MAX_SERVE_RUNS} at a time", runs.len()));
        }
        Ok(runs)
    }
}
