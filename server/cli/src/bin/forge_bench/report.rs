//! Collected figures and their tables.

use std::time::Duration;

/// Latency samples of one measured operation.
pub struct Latency {
    pub name: String,
    sorted: Vec<Duration>,
}

impl Latency {
    pub fn new(name: impl Into<String>, mut samples: Vec<Duration>) -> Latency {
        samples.sort();
        Latency { name: name.into(), sorted: samples }
    }

    pub fn n(&self) -> usize {
        self.sorted.len()
    }

    /// Nearest-rank percentile (`q` in 0..=1).
    pub fn pct(&self, q: f64) -> Duration {
        if self.sorted.is_empty() {
            return Duration::ZERO;
        }
        let rank = (q * self.sorted.len() as f64).ceil() as usize;
        self.sorted[rank.clamp(1, self.sorted.len()) - 1]
    }

    pub fn p50(&self) -> Duration {
        self.pct(0.50)
    }

    pub fn p99(&self) -> Duration {
        self.pct(0.99)
    }

    pub fn mean(&self) -> Duration {
        if self.sorted.is_empty() {
            return Duration::ZERO;
        }
        self.sorted.iter().sum::<Duration>() / self.sorted.len() as u32
    }

    pub fn max(&self) -> Duration {
        self.sorted.last().copied().unwrap_or_default()
    }
}

/// A target from the issues.
pub struct Target {
    pub what: String,
    pub measured: String,
    pub limit: String,
    pub met: bool,
}

#[derive(Default)]
pub struct Report {
    pub latencies: Vec<Latency>,
    /// (figure, value)
    pub figures: Vec<(String, String)>,
    pub targets: Vec<Target>,
    /// Idle RSS (KiB) with the large plan store.
    pub idle_rss_kib: Option<u64>,
    /// Sequential review-write rates (label, writes/s).
    pub throughput: Vec<(String, f64)>,
    /// Scenario tables (Markdown), printed after the others.
    pub tables: Vec<String>,
}

/// Milliseconds with three decimals.
pub fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1000.0)
}

/// `12345` → `12,345`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl Report {
    pub fn latency(&mut self, l: Latency) -> &Latency {
        eprintln!("  {:<58} n={:<5} p50={} ms p99={} ms", l.name, l.n(), ms(l.p50()), ms(l.p99()));
        self.latencies.push(l);
        self.latencies.last().expect("just pushed")
    }

    pub fn figure(&mut self, name: impl Into<String>, value: impl Into<String>) {
        let (name, value) = (name.into(), value.into());
        eprintln!("  {name}: {value}");
        self.figures.push((name, value));
    }

    pub fn find(&self, name: &str) -> Option<&Latency> {
        self.latencies.iter().find(|l| l.name == name)
    }

    pub fn print(&self) {
        if !self.latencies.is_empty() {
            self.print_latencies();
        }
        self.print_rest();
    }

    fn print_latencies(&self) {
        let w = self.latencies.iter().map(|l| l.name.len()).chain([9]).max().unwrap_or(9);
        println!();
        println!(
            "| {:<w$} | {:>6} | {:>9} | {:>9} | {:>9} | {:>9} |",
            "operation", "n", "mean ms", "p50 ms", "p99 ms", "max ms"
        );
        println!(
            "|{}|{}:|{}:|{}:|{}:|{}:|",
            "-".repeat(w + 2),
            "-".repeat(7),
            "-".repeat(10),
            "-".repeat(10),
            "-".repeat(10),
            "-".repeat(10)
        );
        for l in &self.latencies {
            println!(
                "| {:<w$} | {:>6} | {:>9} | {:>9} | {:>9} | {:>9} |",
                l.name,
                l.n(),
                ms(l.mean()),
                ms(l.p50()),
                ms(l.p99()),
                ms(l.max())
            );
        }
    }

    fn print_rest(&self) {
        if !self.figures.is_empty() {
            let w = self.figures.iter().map(|f| f.0.len()).chain([6]).max().unwrap_or(6);
            println!();
            println!("| {:<w$} | value |", "figure");
            println!("|{}|-------|", "-".repeat(w + 2));
            for (name, value) in &self.figures {
                println!("| {name:<w$} | {value} |");
            }
        }
        if !self.targets.is_empty() {
            let w = self.targets.iter().map(|t| t.what.len()).chain([6]).max().unwrap_or(6);
            println!();
            println!("| {:<w$} | measured | target | result |", "target");
            println!("|{}|----------|--------|--------|", "-".repeat(w + 2));
            for t in &self.targets {
                println!(
                    "| {:<w$} | {} | {} | {} |",
                    t.what,
                    t.measured,
                    t.limit,
                    if t.met { "met" } else { "NOT MET" }
                );
            }
        }
        for t in &self.tables {
            println!();
            print!("{t}");
        }
    }
}
