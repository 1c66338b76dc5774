//! A check on PEM files (certificates and keys), done before handing them
//! to TLS so that a wrong file is reported with its name at start.

/// True if `bytes` hold a PEM block whose label ends with `label_suffix`
/// (`"CERTIFICATE"`, `"PRIVATE KEY"` — which also matches `RSA PRIVATE KEY`
/// and `EC PRIVATE KEY`).
pub fn has_block(bytes: &[u8], label_suffix: &str) -> bool {
    String::from_utf8_lossy(bytes)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("-----BEGIN ")?.strip_suffix("-----"))
        .any(|label| label.ends_with(label_suffix))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_blocks_by_label() {
        let pem = b"junk\n-----BEGIN EC PRIVATE KEY-----\nMHc=\n-----END EC PRIVATE KEY-----\n";
        assert!(has_block(pem, "PRIVATE KEY"));
        assert!(!has_block(pem, "CERTIFICATE"));
        assert!(!has_block(b"hello", "CERTIFICATE"));
    }
}
