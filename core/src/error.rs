//! Error messages that carry their causes: an error and its `source()`
//! chain rendered as one line.

use std::error::Error;

/// An error with its sources, e.g. "error reading a body from connection:
/// end of file before message length reached". A source whose message the
/// line already holds (wrappers that repeat their cause) is not repeated.
pub fn error_chain(err: &dyn Error) -> String {
    let mut out = err.to_string();
    push_sources(&mut out, err.source());
    out
}

/// Appends `source` and the sources behind it to `out`, each after ": ",
/// leaving out those whose message `out` already holds. For messages built
/// from something other than the error's `Display` (a gRPC status's code and
/// message, say) followed by its causes.
pub fn push_sources(out: &mut String, mut source: Option<&(dyn Error + 'static)>) {
    while let Some(e) = source {
        let s = e.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        source = e.source();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error with a message and an optional cause.
    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);

    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl Error for Layer {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            self.1.as_deref().map(|e| e as &(dyn Error + 'static))
        }
    }

    #[test]
    fn renders_each_cause_once() {
        let root = Layer("connection reset", None);
        let repeats = Layer("read failed: connection reset", Some(Box::new(root)));
        let top = Layer("error reading a body", Some(Box::new(repeats)));
        assert_eq!(error_chain(&top), "error reading a body: read failed: connection reset");
        assert_eq!(error_chain(&Layer("alone", None)), "alone");
    }

    #[test]
    fn appends_sources_to_another_message() {
        let cause = Layer("tcp connect error", None);
        let mut out = "unavailable: transport error".to_owned();
        push_sources(&mut out, Some(&cause));
        assert_eq!(out, "unavailable: transport error: tcp connect error");
    }
}
