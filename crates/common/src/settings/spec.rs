//! How a setting is declared: its spellings (flag, environment variable,
//! file key), the values it takes, its default and one line of help. The
//! orchestrator's own settings and each backend's are declared with this
//! type, in one table each, and everything that names a setting (the flag
//! parser's help, the environment reader, the file reader's list of keys,
//! validation's ranges, `garrison.toml.example`) reads that table.

use std::ops::RangeInclusive;

/// The values a setting takes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    /// Free text (checked by its owner, e.g. a URL or an id).
    Text,
    /// A file or directory.
    Path,
    /// `true` or `false`.
    Bool,
    /// A whole number in `min..=max` (`max == i64::MAX`: no upper bound).
    /// A whole number within bounds.
    Int {
        /// The smallest accepted.
        min: i64,
        /// The largest accepted.
        max: i64,
    },
    /// A number more than `above` and at most `max`.
    /// A number within bounds.
    Float {
        /// Values must be above this.
        above: f64,
        /// The largest accepted.
        max: f64,
    },
    /// One of these words.
    Choice(&'static [&'static str]),
    /// A duration such as `30d` (see the setting's help).
    Duration,
    /// A list of text (comma-separated in a flag or a variable; an array in
    /// the file).
    List,
    /// The name of a backend, from the build's registry.
    Backend,
}

impl Kind {
    /// The accepted range of an [`Kind::Int`] (everything for the others).
    pub const fn int_range(&self) -> RangeInclusive<i64> {
        match *self {
            Kind::Int { min, max } => min..=max,
            _ => i64::MIN..=i64::MAX,
        }
    }

    /// What values are accepted, in a few words for help texts, e.g.
    /// "1-10000", "at least 128", "runc or runsc"; `None` for free text.
    pub fn describe(&self) -> Option<String> {
        match *self {
            Kind::Int { min, max } if max == i64::MAX => Some(format!("at least {min}")),
            Kind::Int { min, max } => Some(format!("{min}-{max}")),
            Kind::Float { above, max } => Some(format!("more than {above} and at most {max}")),
            Kind::Choice(words) => Some(or_list(words)),
            Kind::Bool => Some("true or false".to_owned()),
            Kind::Text | Kind::Path | Kind::Duration | Kind::List | Kind::Backend => None,
        }
    }

    /// Whether a value given as a flag may start with '-' (numbers: so
    /// that `--max-concurrent -1` reaches validation and is refused there
    /// as out of range, rather than read as a flag).
    pub const fn is_number(&self) -> bool {
        matches!(self, Kind::Int { .. } | Kind::Float { .. })
    }
}

/// What a setting is when it is not given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DefaultValue {
    /// This value, as a TOML literal (`5`, `"local"`, `true`).
    Value(&'static str),
    /// Something that depends on other settings or the machine, described.
    Described(&'static str),
    /// Nothing: the setting is off, or required.
    None,
}

/// One setting, in every layer it can be given.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Setting {
    /// Its name: snake_case, and its key in `garrison.toml` when
    /// `in_file`.
    pub name: &'static str,
    /// The long flag of `garrison serve`, e.g. `--cpus`. `None` for
    /// secrets (argv is visible to every user of the machine), and for
    /// backends' settings declared without one.
    pub flag: Option<&'static str>,
    /// The environment variable.
    pub env: Option<&'static str>,
    /// Whether `name` is a key of `garrison.toml`.
    pub in_file: bool,
    /// Whether an `[[outpost]]` table may override it.
    pub per_outpost: bool,
    /// A secret: never a flag, never in the file, never shown.
    pub secret: bool,
    /// A backend's setting that is an error when given while no outpost
    /// uses that backend (it asks for something only that backend can
    /// give, so ignoring it would hide the mistake).
    pub backend_only: bool,
    /// What values it takes.
    pub kind: Kind,
    /// What it is when not given.
    pub default: DefaultValue,
    /// A value shown (commented out) in `garrison.toml.example` when the
    /// default is not a value.
    pub example: Option<&'static str>,
    /// One line of help (no final period), e.g. "Sessions run at once, per
    /// outpost".
    pub doc: &'static str,
}

impl Setting {
    /// A setting given as flag, variable and file key; the builder methods
    /// below say what differs.
    pub const fn new(
        name: &'static str,
        flag: &'static str,
        env: &'static str,
        kind: Kind,
        doc: &'static str,
    ) -> Self {
        Self {
            name,
            flag: Some(flag),
            env: Some(env),
            in_file: true,
            per_outpost: false,
            secret: false,
            backend_only: false,
            kind,
            default: DefaultValue::None,
            example: None,
            doc,
        }
    }

    /// A secret: only an environment variable (or a file it names).
    pub const fn secret(name: &'static str, env: &'static str, doc: &'static str) -> Self {
        Self {
            flag: None,
            in_file: false,
            secret: true,
            ..Self::new(name, "", env, Kind::Text, doc)
        }
    }

    /// Not a flag (a backend's setting that has none yet).
    pub const fn no_flag(mut self) -> Self {
        self.flag = None;
        self
    }

    /// The default, as the file would spell it.
    pub const fn default(mut self, value: &'static str) -> Self {
        self.default = DefaultValue::Value(value);
        self
    }

    /// The default, described in words.
    pub const fn described_default(mut self, text: &'static str) -> Self {
        self.default = DefaultValue::Described(text);
        self
    }

    /// An example value, as the file would spell it.
    pub const fn example(mut self, value: &'static str) -> Self {
        self.example = Some(value);
        self
    }

    /// May be set per `[[outpost]]` table.
    pub const fn per_outpost(mut self) -> Self {
        self.per_outpost = true;
        self
    }

    /// Refused when no outpost uses its backend (see [`Setting::backend_only`]).
    pub const fn backend_only(mut self) -> Self {
        self.backend_only = true;
        self
    }

    /// Not a key of the file (it names the file, or the file has another
    /// way to say it).
    pub const fn not_in_file(mut self) -> Self {
        self.in_file = false;
        self
    }

    /// The flag without its dashes, as clap names it.
    pub fn long(&self) -> Option<&'static str> {
        self.flag.map(|f| f.trim_start_matches("--"))
    }

    /// The help of its flag: the line, the accepted values, the default.
    /// (The environment variable is added by whoever renders the flag.)
    pub fn help(&self) -> String {
        let mut help = self.doc.to_owned();
        if let Some(values) = self.kind.describe() {
            help.push_str(&format!(", {values}"));
        }
        match self.default {
            DefaultValue::Value(v) => {
                help.push_str(&format!(" [default: {}]", v.trim_matches('"')))
            }
            DefaultValue::Described(text) => help.push_str(&format!(" [default: {text}]")),
            DefaultValue::None => {}
        }
        help
    }
}

/// The setting called `name` in `table`.
pub fn find<'t>(table: &'t [Setting], name: &str) -> Option<&'t Setting> {
    table.iter().find(|s| s.name == name)
}

/// `["a", "b", "c"]` as "a, b or c", for messages that list the accepted
/// values; empty for none.
pub fn or_list<S: AsRef<str>>(items: &[S]) -> String {
    match items.split_last() {
        Some((last, [])) => last.as_ref().to_owned(),
        Some((last, rest)) => {
            let rest: Vec<&str> = rest.iter().map(AsRef::as_ref).collect();
            format!("{} or {}", rest.join(", "), last.as_ref())
        }
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_says_the_values_and_the_default() {
        let s = Setting::new(
            "max_concurrent",
            "--max-concurrent",
            "MAX_CONCURRENT_SESSIONS",
            Kind::Int { min: 1, max: 10 },
            "Sessions run at once",
        )
        .default("5");
        assert_eq!(s.help(), "Sessions run at once, 1-10 [default: 5]");
        assert_eq!(s.long(), Some("max-concurrent"));
        assert_eq!(s.kind.int_range(), 1..=10);
        let s = Setting::new("runtime", "--runtime", "R", Kind::Choice(&["a", "b"]), "X")
            .default("\"a\"");
        assert_eq!(s.help(), "X, a or b [default: a]");
        let key = Setting::secret("api_key", "API_KEY", "The key");
        assert!(key.flag.is_none() && !key.in_file && key.secret);
    }
}
