//! The HTML of the emulator's connect page, as Devin's "Outposts partner
//! integrations" page describes it (step 3): a confirmation with an
//! editable outpost name and platform, the partner's `outpost_image` when
//! given, and Connect / Cancel buttons. The form posts back to
//! `/outposts/connect`; the hidden fields carry what the partner sent.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

/// What the page shows (and its form sends back).
#[derive(Clone, Debug, Default)]
pub(crate) struct ConnectForm {
    pub callback_url: String,
    pub code_challenge: String,
    pub outpost_name: String,
    pub outpost_image: Option<String>,
    pub platform: String,
    pub state: Option<String>,
}

const PLATFORMS: [&str; 3] = ["linux", "macos", "windows"];

/// The confirmation page, with `error` shown above the form when the last
/// confirmation was refused.
pub(crate) fn confirm(status: StatusCode, form: &ConnectForm, error: Option<&str>) -> Response {
    let mut body = String::new();
    body.push_str("<h1>Connect an outpost</h1>");
    if let Some(error) = error {
        body.push_str(&format!(
            "<p class=\"error\" role=\"alert\">{}</p>",
            esc(error)
        ));
    }
    if let Some(image) = &form.outpost_image {
        body.push_str(&format!(
            "<p><img alt=\"outpost image\" width=\"64\" height=\"64\" src=\"{}\"></p>",
            esc(image)
        ));
    }
    body.push_str("<form method=\"post\" action=\"/outposts/connect\">");
    let hidden = |name: &str, value: &str| {
        format!(
            "<input type=\"hidden\" name=\"{}\" value=\"{}\">",
            esc(name),
            esc(value)
        )
    };
    body.push_str(&hidden("callback_url", &form.callback_url));
    body.push_str(&hidden("code_challenge", &form.code_challenge));
    if let Some(image) = &form.outpost_image {
        body.push_str(&hidden("outpost_image", image));
    }
    if let Some(state) = &form.state {
        body.push_str(&hidden("state", state));
    }
    body.push_str(&format!(
        "<p><label>Outpost name <input name=\"outpost_name\" value=\"{}\" required></label></p>",
        esc(&form.outpost_name)
    ));
    body.push_str("<p><label>Platform <select name=\"platform\">");
    for p in PLATFORMS {
        let selected = if p == form.platform { " selected" } else { "" };
        body.push_str(&format!("<option value=\"{p}\"{selected}>{p}</option>"));
    }
    body.push_str("</select></label></p>");
    body.push_str(&format!(
        "<p>Codes are relayed to <code>{}</code>.</p>",
        esc(&form.callback_url)
    ));
    body.push_str(
        "<p><button name=\"action\" value=\"connect\">Connect</button> \
         <button name=\"action\" value=\"cancel\">Cancel</button></p></form>",
    );
    html(status, "Connect an outpost", &body)
}

/// A page that only explains why nothing can go on (no form: the callback
/// cannot be trusted, so there is nowhere to send the browser).
pub(crate) fn refusal(status: StatusCode, message: &str) -> Response {
    let body = format!(
        "<h1>Cannot connect</h1><p class=\"error\" role=\"alert\">{}</p>",
        esc(message)
    );
    html(status, "Cannot connect", &body)
}

fn html(status: StatusCode, title: &str, body: &str) -> Response {
    let page = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{}</title></head>\
         <body>{body}</body></html>",
        esc(title)
    );
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        page,
    )
        .into_response()
}

fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_what_the_partner_sent() {
        assert_eq!(esc("\"><script>"), "&quot;&gt;&lt;script&gt;");
    }
}
