//! The partner connection flow against the emulator's connect page.

use emulator::EmulatorConfig;
use fleet::pkce::{
    ConnectRequest, DEFAULT_CALLBACK_URL, Pkce, callback_code, connect_url, exchange_code,
};
use fleet::{ClientOptions, ConnectError, FleetClient, FleetError, Platform};

use crate::common::env;

/// Plays the admin's browser: opens the connect page, clicks Connect, and
/// returns the code the redirect to the callback carries.
async fn authorize(base: &str, pkce: &Pkce, name: &str) -> String {
    let url = connect_url(
        base,
        DEFAULT_CALLBACK_URL,
        pkce,
        &ConnectRequest {
            outpost_name: Some(name),
            outpost_image: None,
            platform: Some(&Platform::Linux),
        },
    )
    .unwrap();
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let page = browser.get(url.clone()).send().await.unwrap();
    assert_eq!(page.status(), reqwest::StatusCode::OK);
    let mut form: Vec<(String, String)> = url.query_pairs().into_owned().collect();
    form.push(("action".into(), "connect".into()));
    let resp = browser
        .post(format!("{base}/outposts/connect"))
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), reqwest::StatusCode::FOUND);
    let location = resp.headers()[reqwest::header::LOCATION].to_str().unwrap();
    let callback = url::Url::parse(location).unwrap();
    assert_eq!(callback.path(), "/devin/outpost-callback");
    callback_code(&callback).unwrap()
}

#[tokio::test]
async fn code_exchange_gives_a_working_token_once() {
    let env = env(EmulatorConfig::default()).await;
    let base = env.emu.base_url();
    let pkce = Pkce::generate();
    let code = authorize(&base, &pkce, "partner-lab").await;

    let token = exchange_code(&base, &code, &pkce.verifier).await.unwrap();
    assert!(!token.outpost_id.is_empty());
    assert_eq!(token.outpost_name, "partner-lab");
    assert!(!format!("{token:?}").contains(token.access_token.expose()));

    // The token works against the fleet API it names.
    let client = FleetClient::new(
        &token.api_base_url,
        token.access_token.clone(),
        ClientOptions::default(),
    )
    .unwrap();
    let outposts = client.list_outposts().await.unwrap();
    assert!(
        outposts
            .iter()
            .any(|o| o.metadata.outpost_id == token.outpost_id)
    );
    // It is a machine token: reading its outpost needs the orchestrator
    // scope, and the 403 names it.
    let e = client.get_outpost(&token.outpost_id).await.unwrap_err();
    assert!(
        matches!(
            e,
            FleetError::Forbidden {
                scope_hint: "account.outposts.orchestrator",
                ..
            }
        ),
        "{e:?}"
    );

    // A code is single use.
    let again = exchange_code(&base, &code, &pkce.verifier)
        .await
        .unwrap_err();
    assert!(
        matches!(again, ConnectError::InvalidGrant { .. }),
        "{again:?}"
    );
    assert!(!again.to_string().contains(pkce.verifier.expose()));
}

#[tokio::test]
async fn a_wrong_verifier_is_an_invalid_grant() {
    let env = env(EmulatorConfig::default()).await;
    let base = env.emu.base_url();
    let pkce = Pkce::generate();
    let code = authorize(&base, &pkce, "lab2").await;
    let other = Pkce::generate();
    let e = exchange_code(&base, &code, &other.verifier)
        .await
        .unwrap_err();
    assert!(matches!(e, ConnectError::InvalidGrant { .. }), "{e:?}");
    // The code was used up by the failed attempt.
    let e = exchange_code(&base, &code, &pkce.verifier)
        .await
        .unwrap_err();
    assert!(matches!(e, ConnectError::InvalidGrant { .. }), "{e:?}");
    // A made-up code too.
    let e = exchange_code(&base, "code_bogus", &pkce.verifier)
        .await
        .unwrap_err();
    assert!(matches!(e, ConnectError::InvalidGrant { .. }), "{e:?}");
}
