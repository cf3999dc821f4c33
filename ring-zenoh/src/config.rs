//! [`ZenohOptions`]: the Zenoh session a bridge opens, said explicitly.
//!
//! Zenoh's own defaults make a peer listen on every interface (`tcp/[::]:0`) and find peers by
//! UDP multicast; a bridge must not reach outside the machine unless told to. So the options
//! always set the mode and both endpoint lists, and turn multicast scouting off unless asked.
//! A Zenoh configuration file (JSON5, Zenoh's own format) can supply everything else; the
//! options given here override the file's values.

use std::path::PathBuf;

use crate::BridgeError;

/// How long a blocking (gating) put may wait for room before Zenoh closes the session, in
/// microseconds: Zenoh's default (5 s) would turn a far consumer that pauses for 5 s into a
/// broken link; a gating ring waits as long as its consumer does.
pub const GATING_WAIT_BEFORE_CLOSE_US: i64 = 3_600_000_000;

/// Zenoh's session mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Mode {
    /// Talks to peers directly (the default: two bridges need nothing else).
    #[default]
    Peer,
    /// Talks through a router (`zenohd`) it connects to.
    Client,
    /// Routes for others.
    Router,
}

impl Mode {
    /// The mode's name in Zenoh's configuration.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Peer => "peer",
            Self::Client => "client",
            Self::Router => "router",
        }
    }
}

/// The Zenoh session of a bridge.
///
/// # Examples
///
/// ```
/// use ring_zenoh::ZenohOptions;
/// let out = ZenohOptions::new().listen("tcp/127.0.0.1:7447");
/// let inn = ZenohOptions::new().connect("tcp/127.0.0.1:7447");
/// let config = out.to_config()?;
/// assert_eq!(config.get_json("scouting/multicast/enabled")?, "false");
/// assert_eq!(inn.to_config()?.get_json("listen/endpoints")?, "[]");
/// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
/// ```
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct ZenohOptions {
    /// Session mode.
    pub mode: Mode,
    /// Endpoints to listen on (`tcp/127.0.0.1:7447`); none: listen nowhere.
    pub listen: Vec<String>,
    /// Endpoints to connect to; Zenoh retries them in the background until they answer.
    pub connect: Vec<String>,
    /// A Zenoh JSON5 configuration file read first (the fields above override it).
    pub config_file: Option<PathBuf>,
    /// Find peers by UDP multicast (off unless asked: it reaches the whole LAN).
    pub multicast_scouting: bool,
}

impl ZenohOptions {
    /// Peer mode, no endpoints, no multicast scouting.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an endpoint to listen on.
    pub fn listen(mut self, endpoint: &str) -> Self {
        self.listen.push(endpoint.to_owned());
        self
    }

    /// Adds an endpoint to connect to.
    pub fn connect(mut self, endpoint: &str) -> Self {
        self.connect.push(endpoint.to_owned());
        self
    }

    /// The Zenoh configuration these options describe.
    ///
    /// # Errors
    ///
    /// [`BridgeError::Config`] when the file cannot be read or an endpoint is not valid.
    pub fn to_config(&self) -> Result<zenoh::Config, BridgeError> {
        let mut config = match &self.config_file {
            Some(path) => zenoh::Config::from_file(path).map_err(|e| {
                BridgeError::Config(format!("zenoh config file {}: {e}", path.display()))
            })?,
            None => zenoh::Config::default(),
        };
        let json_list = |items: &[String]| {
            let quoted: Vec<String> = items.iter().map(|s| json_string(s)).collect();
            format!("[{}]", quoted.join(","))
        };
        let mut set = |key: &str, value: String| {
            config
                .insert_json5(key, &value)
                .map_err(|e| BridgeError::Config(format!("zenoh option {key} = {value}: {e}")))
        };
        set("mode", json_string(self.mode.as_str()))?;
        set("listen/endpoints", json_list(&self.listen))?;
        set("connect/endpoints", json_list(&self.connect))?;
        set(
            "scouting/multicast/enabled",
            self.multicast_scouting.to_string(),
        )?;
        if self.config_file.is_none() {
            set(
                "transport/link/tx/queue/congestion_control/block/wait_before_close",
                GATING_WAIT_BEFORE_CLOSE_US.to_string(),
            )?;
        }
        Ok(config)
    }

    /// Opens a Zenoh session with these options.
    ///
    /// # Errors
    ///
    /// [`BridgeError::Config`], [`BridgeError::Zenoh`] (for example a listen endpoint in use).
    pub fn open(&self) -> Result<zenoh::Session, BridgeError> {
        use zenoh::Wait as _;
        let config = self.to_config()?;
        zenoh::open(config)
            .wait()
            .map_err(|e| BridgeError::Zenoh(format!("opening the zenoh session: {e}")))
    }
}

/// `s` as a JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_reach_nothing() {
        let c = ZenohOptions::new().to_config().expect("config");
        assert_eq!(
            c.get_json("scouting/multicast/enabled").expect("key"),
            "false"
        );
        assert!(!c.get_json("listen/endpoints").expect("key").contains("tcp"));
        assert!(!c
            .get_json("connect/endpoints")
            .expect("key")
            .contains("tcp"));
        assert_eq!(c.get_json("mode").expect("key"), "\"peer\"");
    }

    #[test]
    fn bad_endpoint_and_missing_file_are_errors() {
        assert!(matches!(
            ZenohOptions::new().listen("not an endpoint").to_config(),
            Err(BridgeError::Config(_))
        ));
        let missing = ZenohOptions {
            config_file: Some("/nonexistent/zenoh.json5".into()),
            ..ZenohOptions::new()
        };
        assert!(matches!(missing.to_config(), Err(BridgeError::Config(_))));
    }

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_string(r#"a"b\c"#), r#""a\"b\\c""#);
    }
}
