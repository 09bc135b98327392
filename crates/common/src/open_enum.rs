//! One macro for the string enums read from other people's servers (Devin's
//! fleet API, Tensorlake's): a value this program does not know becomes
//! `Unknown(text)` instead of a parse failure, so a server that grows a
//! status does not break Garrison, and the text kept is bounded.

/// How many characters of an unknown value are kept: enough to log and
/// round-trip any real value, too few for a hostile server to fill memory.
pub const UNKNOWN_MAX_CHARS: usize = 64;

/// Declares a string enum with a catch-all `Unknown(String)` variant that
/// keeps the server's spelling (up to [`UNKNOWN_MAX_CHARS`] characters).
///
/// ```
/// common::open_enum!(
///     /// A colour.
///     pub enum Colour (default Red) { Red = "red", Blue = "blue" }
/// );
/// assert_eq!(Colour::from("blue"), Colour::Blue);
/// assert_eq!(Colour::from("teal").as_str(), "teal");
/// assert_eq!(Colour::default(), Colour::Red);
/// ```
///
/// `(default Variant)` is optional; with it, the enum implements `Default`.
/// A JSON `null` reads as the empty string (`Unknown("")` unless a variant
/// is spelled `""`). The caller's crate needs `serde` as a dependency.
#[macro_export]
macro_rules! open_enum {
    ($(#[$meta:meta])* $vis:vis enum $name:ident $((default $default:ident))? { $($variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash)]
        $vis enum $name {
            $(
                #[doc = concat!("`", $text, "`")]
                $variant,
            )+
            /// A value this program does not know, kept as the server spelt
            /// it (bounded).
            Unknown(String),
        }

        impl $name {
            /// The value as the server spells it.
            pub fn as_str(&self) -> &str {
                match self {
                    $(Self::$variant => $text,)+
                    Self::Unknown(other) => other,
                }
            }
        }

        $(
            impl Default for $name {
                fn default() -> Self {
                    Self::$default
                }
            }
        )?

        impl From<&str> for $name {
            fn from(text: &str) -> Self {
                match text {
                    $($text => Self::$variant,)+
                    other => Self::Unknown(
                        other.chars().take($crate::open_enum::UNKNOWN_MAX_CHARS).collect(),
                    ),
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> ::std::result::Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> ::std::result::Result<Self, D::Error> {
                let text = <Option<String> as ::serde::Deserialize>::deserialize(d)?.unwrap_or_default();
                Ok(Self::from(text.as_str()))
            }
        }
    };
}
