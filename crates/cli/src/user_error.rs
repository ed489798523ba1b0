//! [`UserError`]: a mistake of the user's, which `main` prints as one line
//! and exits 2 for.

/// A mistake of the user's (bad config, missing data): one line, exit code 2.
#[derive(Debug)]
pub struct UserError(pub String);

impl std::fmt::Display for UserError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UserError {}
