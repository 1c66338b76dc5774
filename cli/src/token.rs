//! `--token` and `--token-file`, shared by the worker and the clients.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use stoker_core::Secret;

/// The shared bearer token: a worker requires it on every request (health
/// checks excepted), a client sends it. Give it inline or as a file (a
/// Docker or Kubernetes secret), not both.
#[derive(Clone, Debug, Default, Args)]
pub struct TokenArgs {
    /// Bearer token shared by workers and clients.
    #[arg(long, env = "STOKER_TOKEN", hide_env_values = true)]
    pub token: Option<Secret>,
    /// Read the bearer token from this file (its first line).
    #[arg(long, env = "STOKER_TOKEN_FILE", value_name = "PATH", conflicts_with = "token")]
    pub token_file: Option<PathBuf>,
}

impl TokenArgs {
    /// The token, read from `--token-file` when that is the one given.
    pub fn secret(&self) -> anyhow::Result<Option<Secret>> {
        let Some(path) = &self.token_file else {
            return Ok(self.token.clone());
        };
        let text =
            std::fs::read_to_string(path).with_context(|| format!("cannot read --token-file {}", path.display()))?;
        let token = text.lines().next().unwrap_or("").trim();
        anyhow::ensure!(!token.is_empty(), "--token-file {} holds no token", path.display());
        Ok(Some(Secret::new(token)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_file_gives_its_first_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "s3cret\n").unwrap();
        let args = TokenArgs {
            token: None,
            token_file: Some(path.clone()),
        };
        assert_eq!(args.secret().unwrap().unwrap().expose(), "s3cret");

        std::fs::write(&path, "\n").unwrap();
        let err = args.secret().unwrap_err().to_string();
        assert!(
            err.contains("holds no token") && err.contains(path.to_str().unwrap()),
            "{err}"
        );

        let missing = TokenArgs {
            token: None,
            token_file: Some(dir.path().join("absent")),
        };
        let err = missing.secret().unwrap_err().to_string();
        assert!(
            err.contains("cannot read --token-file") && err.contains("absent"),
            "{err}"
        );
    }
}
