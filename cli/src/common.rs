//! What the subcommands share, below all of them: sizes on the command
//! line ([`parse_bytes`], [`ByteSize`], [`human_bytes`]) and how this
//! program runs itself again ([`set_self_command`]). The crate root
//! re-exports them.

/// How this program runs itself (`stoker worker` for local workers): set
/// by a host that is not the `stoker` binary, such as the Python package
/// (`python -m stoker`).
static SELF_COMMAND: std::sync::OnceLock<Vec<std::ffi::OsString>> = std::sync::OnceLock::new();

/// Says how to run this command line again in a new process: the
/// program and its first arguments (`[python, -m, stoker]`). Without it,
/// the running executable is.
pub fn set_self_command(command: Vec<std::ffi::OsString>) {
    let _ = SELF_COMMAND.set(command);
}

/// The program and first arguments that run this command line.
pub(crate) fn self_command() -> anyhow::Result<Vec<std::ffi::OsString>> {
    if let Some(c) = SELF_COMMAND.get() {
        return Ok(c.clone());
    }
    let exe = std::env::current_exe().map_err(|e| anyhow::anyhow!("cannot find this program's path: {e}"))?;
    Ok(vec![exe.into_os_string()])
}

/// Parses sizes like `64M`, `1G`, `512k` or plain bytes.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let unit = s[i..].to_ascii_lowercase();
            let mult: u64 = match unit.trim_end_matches("ib").trim_end_matches('b') {
                "" => 1,
                "k" => 1 << 10,
                "m" => 1 << 20,
                "g" => 1 << 30,
                "t" => 1 << 40,
                _ => return Err(format!("unknown size unit in {s:?} (use k, M, G)")),
            };
            (&s[..i], mult)
        }
        None => (s, 1),
    };
    let n: f64 = num.trim().parse().map_err(|_| format!("not a size: {s:?}"))?;
    if !(n.is_finite() && n >= 0.0) {
        return Err(format!("not a size: {s:?}"));
    }
    Ok((n * mult as f64) as u64)
}

/// Human-readable byte counts, in the binary units [`parse_bytes`] reads
/// (`64M` in a flag is the `64.0 MiB` printed back).
pub fn human_bytes(n: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{v:.0} {}", UNITS[i])
    } else {
        format!("{v:.1} {}", UNITS[i])
    }
}

/// A byte count on the command line: parsed by [`parse_bytes`] and printed
/// in the same binary units, so that clap's `[default: 64M]` shows the
/// library constant a flag defaults to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl std::str::FromStr for ByteSize {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        parse_bytes(s).map(ByteSize)
    }
}

impl std::fmt::Display for ByteSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const UNITS: [(u32, &str); 4] = [(40, "T"), (30, "G"), (20, "M"), (10, "k")];
        match UNITS
            .iter()
            .find(|(shift, _)| self.0 != 0 && self.0.is_multiple_of(1u64 << shift))
        {
            Some((shift, unit)) => write!(f, "{}{unit}", self.0 >> shift),
            None => write!(f, "{}", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_bytes("1024"), Ok(1024));
        assert_eq!(parse_bytes("64M"), Ok(64 << 20));
        assert_eq!(parse_bytes("1.5k"), Ok(1536));
        assert_eq!(parse_bytes("2GiB"), Ok(2 << 30));
        assert!(parse_bytes("12x").is_err());
        assert!(parse_bytes("-1").is_err());
    }

    #[test]
    fn humans_read_bytes() {
        assert_eq!(human_bytes(999.0), "999 B");
        assert_eq!(human_bytes(1536.0 * 1024.0), "1.5 MiB");
    }

    #[test]
    fn byte_sizes_print_as_they_parse() {
        for s in ["64M", "2M", "4G", "512M", "1536", "3k", "0"] {
            assert_eq!(s.parse::<ByteSize>().unwrap().to_string(), s);
        }
        assert_eq!(ByteSize(64 << 20).to_string(), "64M");
    }
}
