//! What a push authenticates with: a bearer token or a user and password (basic auth), and
//! the tenant (`X-Scope-OrgID`) of a multi-tenant server (Grafana's). Read from a file
//! (`--pyroscope-credentials`, `--otlp-credentials`) or from the environment, never from the
//! command line, where every user of the host can read them (`ps`).

use std::{
    fs,
    io::Read as _,
    os::unix::fs::{MetadataExt as _, OpenOptionsExt as _},
    path::{Path, PathBuf},
};

use base64::Engine as _;
use thiserror::Error;

use super::Wire;

/// The environment variable that gives `--pyroscope`'s URL.
pub const URL_VARIABLE: &str = "THRTRACE_PYROSCOPE_URL";
/// The one that gives `--otlp`'s.
pub const OTLP_URL_VARIABLE: &str = "THRTRACE_OTLP_URL";

/// The environment variables read when no file is given, each with the file's key it stands
/// for: Pyroscope's, then OTLP's.
const CREDENTIAL_VARIABLES: [[(&str, &str); 4]; 2] = [
    [
        ("THRTRACE_PYROSCOPE_TOKEN", "token"),
        ("THRTRACE_PYROSCOPE_USER", "user"),
        ("THRTRACE_PYROSCOPE_PASSWORD", "password"),
        ("THRTRACE_PYROSCOPE_TENANT", "tenant"),
    ],
    [
        ("THRTRACE_OTLP_TOKEN", "token"),
        ("THRTRACE_OTLP_USER", "user"),
        ("THRTRACE_OTLP_PASSWORD", "password"),
        ("THRTRACE_OTLP_TENANT", "tenant"),
    ],
];

/// The credential variables of a push speaking `wire`.
fn variables(wire: Wire) -> [(&'static str, &'static str); 4] {
    match wire {
        Wire::Pyroscope => CREDENTIAL_VARIABLES[0],
        Wire::Otlp => CREDENTIAL_VARIABLES[1],
    }
}

/// Where a push speaking `wire` takes its credentials from, for messages: the option that
/// names a file, and the variables.
pub fn given_by(wire: Wire) -> (String, String) {
    let [(token, _), (user, _), (password, _), _] = variables(wire);
    (
        format!("{}-credentials", wire.option()),
        format!("{user} and {password}, or {token}"),
    )
}

/// Every variable the pushes read, the URLs' included.
pub fn environment() -> impl Iterator<Item = &'static str> {
    [URL_VARIABLE, OTLP_URL_VARIABLE].into_iter().chain(
        CREDENTIAL_VARIABLES
            .iter()
            .flatten()
            .map(|(variable, _)| *variable),
    )
}

/// A credentials file larger than this is no credentials file.
const MAX_FILE_BYTES: u64 = 64 << 10;

#[derive(Debug, Error)]
pub enum CredentialsError {
    #[error("cannot read the credentials file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the credentials file {} can be read by other users (mode {mode:o}): chmod 600 it",
        path.display()
    )]
    Readable { path: PathBuf, mode: u32 },
    #[error("the credentials file {} is not a regular file of at most 64 KiB", path.display())]
    NotAFile { path: PathBuf },
    #[error("{place}: {problem}")]
    Invalid { place: String, problem: String },
}

/// How the pushes authenticate.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    /// The `Authorization` header's value, if any.
    authorization: Option<String>,
    /// The tenant, for `X-Scope-OrgID`.
    tenant: Option<String>,
}

// Never printed: a debug line or a panic message must not carry a secret.
impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("authorization", &self.authorization.as_ref().map(|_| "…"))
            .field("tenant", &self.tenant)
            .finish()
    }
}

impl Credentials {
    /// From `file` if given (the environment's are then refused, to leave no doubt which are
    /// used), else from the environment; none is fine (a server on the host, or behind a proxy
    /// that adds them).
    pub fn load(file: Option<&Path>, wire: Wire) -> Result<Credentials, CredentialsError> {
        let from_env: Vec<(&str, &str, String)> = variables(wire)
            .into_iter()
            .filter_map(|(var, key)| Some((var, key, std::env::var(var).ok()?)))
            .filter(|(_, _, value)| !value.is_empty())
            .collect();
        if let Some(path) = file {
            if let Some((var, ..)) = from_env.first() {
                return Err(CredentialsError::Invalid {
                    place: path.display().to_string(),
                    problem: format!(
                        "{var} is set too: give credentials in the file or the environment, \
                         not both"
                    ),
                });
            }
            return Self::parse(&path.display().to_string(), &read_private(path)?);
        }
        let pairs: Vec<(String, &str, &str)> = from_env
            .iter()
            .map(|(var, key, value)| (format!("environment {var}"), *key, value.as_str()))
            .collect();
        Self::from_pairs("the environment", &pairs)
    }

    /// A file of `key = value` lines (`token`, `user`, `password`, `tenant`; `#` comments).
    fn parse(name: &str, text: &str) -> Result<Credentials, CredentialsError> {
        let mut pairs = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let place = format!("{name} line {}", n + 1);
            let Some((key, value)) = line.split_once('=') else {
                return Err(CredentialsError::Invalid {
                    place,
                    problem: "expected `key = value` (token, user, password or tenant)".into(),
                });
            };
            pairs.push((place, key.trim(), value.trim()));
        }
        Self::from_pairs(name, &pairs)
    }

    /// Checked pairs of (where it was given, key, value).
    fn from_pairs<S: AsRef<str>>(
        name: &str,
        pairs: &[(S, &str, &str)],
    ) -> Result<Credentials, CredentialsError> {
        let mut values: [Option<&str>; 4] = [None; 4];
        const KEYS: [&str; 4] = ["token", "user", "password", "tenant"];
        for (place, key, value) in pairs {
            let invalid = |problem: String| CredentialsError::Invalid {
                place: place.as_ref().to_owned(),
                problem,
            };
            let Some(slot) = KEYS.iter().position(|k| k == key) else {
                return Err(invalid(format!(
                    "unknown key `{key}`: give token, user, password or tenant"
                )));
            };
            if value.is_empty() || value.chars().any(char::is_control) {
                return Err(invalid(format!(
                    "{key} is empty or holds control characters"
                )));
            }
            if values[slot].replace(value).is_some() {
                return Err(invalid(format!("{key} is given twice")));
            }
        }
        let [token, user, password, tenant] = values;
        let invalid = |problem: &str| CredentialsError::Invalid {
            place: name.to_owned(),
            problem: problem.to_owned(),
        };
        let authorization = match (token, user, password) {
            (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
                return Err(invalid(
                    "a token and a user or password: give one way to authenticate",
                ));
            }
            (Some(token), None, None) => Some(format!("Bearer {token}")),
            (None, Some(user), Some(password)) => {
                if user.contains(':') {
                    return Err(invalid("the user holds `:`, which basic auth cannot carry"));
                }
                let pair =
                    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
                Some(format!("Basic {pair}"))
            }
            (None, Some(_), None) => return Err(invalid("a user without a password")),
            (None, None, Some(_)) => return Err(invalid("a password without a user")),
            (None, None, None) => None,
        };
        Ok(Credentials {
            authorization,
            tenant: tenant.map(str::to_owned),
        })
    }

    /// The `Authorization` header's value, if any.
    pub fn authorization(&self) -> Option<&str> {
        self.authorization.as_deref()
    }

    /// The `X-Scope-OrgID` header's value, if any.
    pub fn tenant(&self) -> Option<&str> {
        self.tenant.as_deref()
    }
}

/// The file's text, refused unless it is a regular file only its owner can read (a secret
/// others could read is no longer one: ssh refuses such keys too), not followed if a link.
fn read_private(path: &Path) -> Result<String, CredentialsError> {
    let read = |source| CredentialsError::Read {
        path: path.to_owned(),
        source,
    };
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(read)?;
    let metadata = file.metadata().map_err(read)?;
    if !metadata.is_file() || metadata.len() > MAX_FILE_BYTES {
        return Err(CredentialsError::NotAFile {
            path: path.to_owned(),
        });
    }
    let mode = metadata.mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(CredentialsError::Readable {
            path: path.to_owned(),
            mode,
        });
    }
    let mut text = String::new();
    file.take(MAX_FILE_BYTES)
        .read_to_string(&mut text)
        .map_err(read)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Result<Credentials, String> {
        Credentials::parse("creds", text).map_err(|e| e.to_string())
    }

    #[test]
    fn a_token_a_user_and_password_or_nothing_with_a_tenant() {
        let token = parsed("# Grafana Cloud\ntoken = abc\ntenant = team-a\n").unwrap();
        assert_eq!(token.authorization(), Some("Bearer abc"));
        assert_eq!(token.tenant(), Some("team-a"));
        let basic = parsed("user=alice\npassword = open sesame").unwrap();
        // base64("alice:open sesame")
        assert_eq!(
            basic.authorization(),
            Some("Basic YWxpY2U6b3BlbiBzZXNhbWU=")
        );
        assert_eq!(basic.tenant(), None);
        assert_eq!(parsed("\n# nothing\n").unwrap(), Credentials::default());
    }

    #[test]
    fn what_cannot_be_meant_is_refused_with_its_line() {
        for (text, said) in [
            ("token abc", "creds line 1: expected `key = value`"),
            ("\nsecret = x", "creds line 2: unknown key `secret`"),
            ("token = a\ntoken = b", "creds line 2: token is given twice"),
            ("token =", "creds line 1: token is empty"),
            (
                "tenant = a\u{7}b",
                "creds line 1: tenant is empty or holds control",
            ),
            (
                "token = a\nuser = b",
                "creds: a token and a user or password",
            ),
            ("user = b", "creds: a user without a password"),
            ("password = b", "creds: a password without a user"),
            ("user = a:b\npassword = c", "creds: the user holds `:`"),
        ] {
            let error = parsed(text).unwrap_err();
            assert!(error.starts_with(said), "{text:?}: {error}");
        }
    }

    #[test]
    fn a_file_others_can_read_is_refused() {
        let dir = std::env::temp_dir().join(format!("thrtrace-creds-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("credentials");
        fs::write(&path, "token = abc\n").unwrap();
        fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
        let error = read_private(&path).unwrap_err().to_string();
        assert!(
            error.contains("can be read by other users (mode 644): chmod 600"),
            "{error}"
        );
        fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        assert_eq!(read_private(&path).unwrap(), "token = abc\n");
        fs::remove_dir_all(&dir).unwrap();
    }
}
