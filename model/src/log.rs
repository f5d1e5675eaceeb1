//! What a step did, in words, for the trace of a counterexample. The
//! search runs with the log off: nothing is formatted then.

/// The lines a step writes, when kept.
#[derive(Debug, Default)]
pub(crate) struct Log {
    lines: Option<Vec<String>>,
}

impl Log {
    /// A log that keeps nothing (the search's).
    pub(crate) fn off() -> Log {
        Log { lines: None }
    }

    /// A log that keeps its lines (a trace's).
    pub(crate) fn on() -> Log {
        Log {
            lines: Some(Vec::new()),
        }
    }

    /// Keeps the line `line` makes, if this log keeps lines.
    pub(crate) fn note(&mut self, line: impl FnOnce() -> String) {
        if let Some(lines) = self.lines.as_mut() {
            lines.push(line());
        }
    }

    /// The lines kept.
    pub(crate) fn into_lines(self) -> Vec<String> {
        self.lines.unwrap_or_default()
    }
}
