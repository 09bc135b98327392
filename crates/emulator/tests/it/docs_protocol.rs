//! The emulator against Devin's published Outposts docs, one test per rule,
//! each citing the page and section it follows ("reference" is
//! docs.devin.ai's Outposts "Reference" page, "partners" its "Outposts
//! partner integrations" page). Everything talks to 127.0.0.1 only.

use std::collections::HashMap;
use std::time::Duration;

use emulator::{Emulator, EmulatorConfig, NewSession, SCOPE_MACHINE, SCOPE_ORCHESTRATOR};
use fleet::Platform;
use reqwest::StatusCode;
use serde_json::Value;

const CHALLENGE: &str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";
const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";

async fn start() -> Emulator {
    Emulator::start(EmulatorConfig {
        keepalive: Duration::from_millis(50),
        remote_binary: Some(std::path::PathBuf::from("/nonexistent/devin-remote-sim")),
        ..EmulatorConfig::default()
    })
    .await
    .unwrap()
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

fn session(emu: &Emulator, outpost: &str, id: &str) {
    emu.create_session(NewSession {
        outpost_id: outpost.into(),
        session_id: Some(id.into()),
        ..Default::default()
    })
    .unwrap();
}

async fn get(emu: &Emulator, path: &str, token: &str) -> (StatusCode, Value) {
    let resp = http()
        .get(format!("{}/opbeta/outposts{path}", emu.base_url()))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}

fn ids(page: &Value) -> Vec<String> {
    let mut ids: Vec<String> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["metadata"]["session_id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

/// Reference, "List queued sessions": `outpost` — "Filter by outpost ID.
/// Applies to both list and watch." Not required: without it the account's
/// entries are listed. An unknown outpost filters everything out (200 and
/// an empty list, as Cognition's mock server answers), so with a machine
/// token an unknown outpost looks like an idle one; only `GET` on the
/// outpost (orchestrator scope) answers 404 for it.
#[tokio::test]
async fn outpost_is_a_filter_on_the_queue_list_not_a_requirement() {
    let emu = start().await;
    let a = emu.create_outpost("a", Platform::Linux);
    let b = emu.create_outpost("b", Platform::Linux);
    session(&emu, &a, "devin-a");
    session(&emu, &b, "devin-b");
    let machine = emu.mint_token(&[SCOPE_MACHINE]);

    let (status, all) = get(&emu, "/devins", &machine).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ids(&all), ["devin-a", "devin-b"]);
    let (_, only_a) = get(&emu, &format!("/devins?outpost={a}"), &machine).await;
    assert_eq!(ids(&only_a), ["devin-a"]);

    let unknown = "outpost_env-000000000000";
    let (status, none) = get(&emu, &format!("/devins?outpost={unknown}"), &machine).await;
    assert_eq!(status, StatusCode::OK, "a filter, not a lookup");
    assert!(ids(&none).is_empty());
    assert_eq!(none["total"], 0);
    // How an unknown outpost can still be told apart: GET on it, which
    // needs the orchestrator scope.
    let (status, _) = get(&emu, &format!("/outposts/{unknown}"), &machine).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let orchestrator = emu.mint_token(&[SCOPE_ORCHESTRATOR]);
    let (status, _) = get(&emu, &format!("/outposts/{unknown}"), &orchestrator).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// Reference, "Watch for changes": `GET /opbeta/outposts/devins?watch=true`
/// with no outpost streams the account's changes; with one, only its own.
#[tokio::test]
async fn watch_without_an_outpost_streams_the_accounts_entries() {
    let emu = start().await;
    let a = emu.create_outpost("a", Platform::Linux);
    let b = emu.create_outpost("b", Platform::Linux);
    session(&emu, &a, "devin-a");
    session(&emu, &b, "devin-b");
    let seen = |query: String| {
        let emu = &emu;
        async move {
            let mut resp = http()
                .get(format!("{}/opbeta/outposts/devins?{query}", emu.base_url()))
                .bearer_auth(emu.account_token())
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), StatusCode::OK);
            let mut text = String::new();
            // Until the first keepalive: the replay comes before it.
            while !text.contains(": keepalive") {
                let chunk = resp.chunk().await.unwrap().expect("stream open");
                text.push_str(std::str::from_utf8(&chunk).unwrap());
            }
            let mut ids: Vec<String> = text
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .map(|d| {
                    let v: Value = serde_json::from_str(d).unwrap();
                    v["object"]["metadata"]["session_id"]
                        .as_str()
                        .unwrap()
                        .to_owned()
                })
                .collect();
            ids.sort();
            ids
        }
    };
    let all = tokio::time::timeout(Duration::from_secs(20), seen("watch=true".into()))
        .await
        .unwrap();
    assert_eq!(all, ["devin-a", "devin-b"]);
    let only_b = tokio::time::timeout(
        Duration::from_secs(20),
        seen(format!("watch=true&outpost={b}")),
    )
    .await
    .unwrap();
    assert_eq!(only_b, ["devin-b"]);
}

/// Reference, "Outposts": "Create, get, and delete require the orchestrator
/// scope"; "Authentication": the orchestrator scope "implies the machine
/// scope". A 403 names the scope that is missing.
#[tokio::test]
async fn outposts_routes_need_the_orchestrator_scope_which_implies_machine() {
    let emu = start().await;
    let outpost = emu.create_outpost("lab", Platform::Linux);
    let machine = emu.mint_token(&[SCOPE_MACHINE]);
    let orchestrator = emu.mint_token(&[SCOPE_ORCHESTRATOR]);
    for path in [format!("/outposts/{outpost}"), format!("/{outpost}")] {
        let (status, body) = get(&emu, &path, &machine).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}");
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains(SCOPE_ORCHESTRATOR),
            "{body}"
        );
        let (status, body) = get(&emu, &path, &orchestrator).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert_eq!(body["spec"]["name"], "lab");
    }
    let delete = http()
        .delete(format!(
            "{}/opbeta/outposts/outposts/{outpost}",
            emu.base_url()
        ))
        .bearer_auth(&machine)
        .send()
        .await
        .unwrap();
    assert_eq!(delete.status(), StatusCode::FORBIDDEN);
    // Implied machine scope: the orchestrator token reads the queue.
    let (status, _) = get(&emu, &format!("/devins?outpost={outpost}"), &orchestrator).await;
    assert_eq!(status, StatusCode::OK);
    // Listing outposts is not among "create, get, and delete".
    let (status, _) = get(&emu, "/outposts", &machine).await;
    assert_eq!(status, StatusCode::OK);
    let scopeless = emu.mint_token(&[]);
    let (status, body) = get(&emu, "/devins", &scopeless).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(
        body["message"].as_str().unwrap().contains(SCOPE_MACHINE),
        "{body}"
    );
}

fn connect_fields<'a>(callback: &'a str, name: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("callback_url", callback),
        ("code_challenge", CHALLENGE),
        ("outpost_name", name),
        ("outpost_image", "https://partner.example.com/logo.png"),
        ("platform", "macos"),
    ]
}

async fn click_connect(emu: &Emulator, fields: &[(&str, &str)]) -> reqwest::Response {
    let mut form = fields.to_vec();
    form.push(("action", "connect"));
    http()
        .post(format!("{}/outposts/connect", emu.base_url()))
        .form(&form)
        .send()
        .await
        .unwrap()
}

/// Partners, "3. Admin confirms": "a confirmation with an editable outpost
/// name and platform (and your `outpost_image` if provided)".
#[tokio::test]
async fn the_connect_page_shows_the_suggestions_editable() {
    let emu = start().await;
    let fields = connect_fields(fleet::pkce::DEFAULT_CALLBACK_URL, "suggested");
    let page = http()
        .get(format!("{}/outposts/connect", emu.base_url()))
        .query(&fields)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let html = page.text().await.unwrap();
    assert!(
        html.contains("<input name=\"outpost_name\" value=\"suggested\""),
        "{html}"
    );
    assert!(html.contains("<select name=\"platform\">"), "{html}");
    assert!(html.contains("<option value=\"macos\" selected>"), "{html}");
    assert!(
        html.contains("src=\"https://partner.example.com/logo.png\""),
        "{html}"
    );
    // The admin edits the name before confirming: the edit wins.
    let mut edited = fields.clone();
    edited[2] = ("outpost_name", "edited");
    let resp = click_connect(&emu, &edited).await;
    assert_eq!(resp.status(), StatusCode::FOUND);
    let location = url::Url::parse(resp.headers()["location"].to_str().unwrap()).unwrap();
    let code: HashMap<_, _> = location.query_pairs().into_owned().collect();
    let token = exchange(&emu, &code["code"]).await;
    assert_eq!(token["outpost_name"], "edited");
}

async fn exchange(emu: &Emulator, code: &str) -> Value {
    let resp = http()
        .post(format!("{}/outposts/connection-token", emu.base_url()))
        .form(&[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("code_verifier", VERIFIER),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["cache-control"], "no-store");
    resp.json().await.unwrap()
}

/// Partners, "Prerequisites": "Every `callback_url` you use must be on
/// Devin's allowlist ... A URL that is not on the list is rejected". No
/// redirect goes to an unlisted URL; the page says why.
#[tokio::test]
async fn a_callback_not_on_the_allowlist_is_refused() {
    let emu = start().await;
    let unlisted = "http://127.0.0.1:9/elsewhere";
    let fields = connect_fields(unlisted, "x");
    let page = http()
        .get(format!("{}/outposts/connect", emu.base_url()))
        .query(&fields)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::BAD_REQUEST);
    let html = page.text().await.unwrap();
    assert!(
        html.contains("is not on this integration&#39;s allowlist"),
        "{html}"
    );
    let resp = click_connect(&emu, &fields).await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert!(resp.headers().get("location").is_none());
    // Once allowlisted, the same URL works.
    emu.allow_callback(unlisted);
    assert_eq!(
        click_connect(&emu, &fields).await.status(),
        StatusCode::FOUND
    );
}

/// Partners, "3. Admin confirms": Devin validates "that the outpost name is
/// free"; the page stays, with the name editable and the reason shown.
#[tokio::test]
async fn a_taken_outpost_name_is_refused_on_the_page() {
    let emu = start().await;
    emu.create_outpost("taken", Platform::Linux);
    let fields = connect_fields(fleet::pkce::DEFAULT_CALLBACK_URL, "taken");
    let resp = click_connect(&emu, &fields).await;
    assert_eq!(resp.status(), StatusCode::CONFLICT);
    assert!(resp.headers().get("location").is_none());
    let html = resp.text().await.unwrap();
    assert!(
        html.contains("The outpost name &quot;taken&quot; is already taken"),
        "{html}"
    );
    assert!(html.contains("garrison connect --manual"), "{html}");
    assert!(html.contains("<input name=\"outpost_name\""), "{html}");
}

/// Partners, steps 3, 5, 6 and "Error handling": no outpost or service
/// user exists before redemption; redemption creates both and returns a
/// token "scoped to run the outpost worker" (machine scope only); a
/// replayed code is `400 invalid_grant` "Invalid or expired connection
/// code".
#[tokio::test]
async fn redemption_creates_the_outpost_once_with_a_machine_token() {
    let emu = start().await;
    let fields = connect_fields(fleet::pkce::DEFAULT_CALLBACK_URL, "partnered");
    let resp = click_connect(&emu, &fields).await;
    let location = url::Url::parse(resp.headers()["location"].to_str().unwrap()).unwrap();
    assert!(
        location
            .as_str()
            .starts_with(fleet::pkce::DEFAULT_CALLBACK_URL)
    );
    let code = location
        .query_pairs()
        .find(|(k, _)| k == "code")
        .unwrap()
        .1
        .into_owned();
    let (_, outposts) = get(&emu, "/outposts", &emu.account_token()).await;
    assert!(!outposts.to_string().contains("partnered"), "{outposts}");
    assert!(emu.service_users().is_empty());

    let token = exchange(&emu, &code).await;
    assert_eq!(token["outpost_name"], "partnered");
    assert_eq!(token["api_base_url"], emu.base_url());
    assert_eq!(token["token_type"], "bearer");
    assert_eq!(
        emu.service_users(),
        [token["service_user_id"].as_str().unwrap()]
    );
    let outpost_id = token["outpost_id"].as_str().unwrap();
    let access = token["access_token"].as_str().unwrap();
    let (status, _) = get(&emu, &format!("/devins?outpost={outpost_id}"), access).await;
    assert_eq!(status, StatusCode::OK, "machine scope");
    let (status, _) = get(&emu, &format!("/outposts/{outpost_id}"), access).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "no orchestrator scope");
    let (_, got) = get(
        &emu,
        &format!("/outposts/{outpost_id}"),
        &emu.account_token(),
    )
    .await;
    assert_eq!(got["spec"]["platform"], "macos");

    let replay = exchange(&emu, &code).await;
    assert_eq!(replay["error"], "invalid_grant");
    assert_eq!(
        replay["error_description"],
        "Invalid or expired connection code"
    );
    assert_eq!(emu.service_users().len(), 1);
}
