//! A counterexample as a reader follows it: numbered steps, the tick, and
//! what each step did to the masters and the clients.

use std::fmt;

use crate::search::Counterexample;

impl fmt::Display for Counterexample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "violation: {}", self.violation)?;
        writeln!(f, "trace ({} steps):", self.steps.len())?;
        for (i, step) in self.steps.iter().enumerate() {
            writeln!(f, "{:3}. [tick {}] {}", i + 1, step.now, step.action)?;
            for line in &step.lines {
                writeln!(f, "       {line}")?;
            }
        }
        Ok(())
    }
}
