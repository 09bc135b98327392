//! `garrison connect` as a program, against the in-process emulator: the
//! test plays the browser (it reads the printed connect URL, clicks Connect
//! on the emulator's connect page, and follows its redirect to the local
//! callback), and `--manual` with a token piped on stdin.
//!
//! Only one test uses the fixed default callback port (tests run in
//! parallel); the others pass `--callback-url` with a free port, put on the
//! emulator's allowlist as a registered URL would be.

use crate::cli::{HANG_GUARD, Home, Ran, mode};
use crate::common;
use fleet::{ClientOptions, FleetClient, Platform, Secret};
use orchestrator::settings::{Credentials, load_credentials};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

/// A running `garrison connect` (browser flow) whose connect URL has been
/// read from its stdout.
struct Connecting {
    child: tokio::process::Child,
    connect_url: url::Url,
    stdout_so_far: String,
    stdout: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    stderr: tokio::task::JoinHandle<String>,
}

impl Connecting {
    async fn start(home: &Home, emu: &emulator::Emulator, extra: &[&str]) -> Connecting {
        let base = emu.base_url();
        let mut args = vec!["connect", "--api-url", &base, "--app-url", &base];
        args.extend_from_slice(extra);
        let mut child = home.command(&args, &[]).spawn().expect("garrison starts");
        let mut stderr_pipe = child.stderr.take().unwrap();
        let stderr = tokio::spawn(async move {
            let mut text = String::new();
            let _ = stderr_pipe.read_to_string(&mut text).await;
            text
        });
        let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut stdout_so_far = String::new();
        let connect_url = tokio::time::timeout(HANG_GUARD, async {
            while let Some(line) = stdout.next_line().await.unwrap() {
                stdout_so_far.push_str(&line);
                stdout_so_far.push('\n');
                let line = line.trim();
                if line.starts_with("http") && line.contains("/outposts/connect?") {
                    return url::Url::parse(line).unwrap();
                }
            }
            panic!("no connect URL printed:\n{stdout_so_far}");
        })
        .await
        .expect("the connect URL is printed");
        Connecting {
            child,
            connect_url,
            stdout_so_far,
            stdout,
            stderr,
        }
    }

    /// Reads stdout up to the next connect URL (a new attempt's page).
    async fn next_connect_url(&mut self) -> url::Url {
        let stdout = &mut self.stdout;
        let so_far = &mut self.stdout_so_far;
        let url = tokio::time::timeout(HANG_GUARD, async {
            while let Some(line) = stdout.next_line().await.unwrap() {
                so_far.push_str(&line);
                so_far.push('\n');
                let line = line.trim();
                if line.starts_with("http") && line.contains("/outposts/connect?") {
                    return url::Url::parse(line).unwrap();
                }
            }
            panic!("no further connect URL printed:\n{so_far}");
        })
        .await
        .expect("a new connect URL is printed");
        self.connect_url = url.clone();
        url
    }

    fn param(&self, key: &str) -> Option<String> {
        self.connect_url
            .query_pairs()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.into_owned())
    }

    fn callback_url(&self) -> url::Url {
        url::Url::parse(&self.param("callback_url").expect("callback_url")).unwrap()
    }

    async fn finish(mut self) -> Ran {
        let status = tokio::time::timeout(HANG_GUARD, self.child.wait())
            .await
            .expect("garrison finishes")
            .unwrap();
        let mut stdout = self.stdout_so_far;
        while let Some(line) = self.stdout.next_line().await.unwrap() {
            stdout.push_str(&line);
            stdout.push('\n');
        }
        Ran {
            success: status.success(),
            stdout,
            stderr: self.stderr.await.unwrap(),
        }
    }
}

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(HANG_GUARD)
        .build()
        .unwrap()
}

/// Clicks Connect on the connect page the URL opens; returns the redirect
/// target (the callback with the code).
async fn approve(emu: &emulator::Emulator, connect_url: &url::Url) -> String {
    let http = no_redirects();
    let page = http.get(connect_url.clone()).send().await.unwrap();
    assert_eq!(page.status(), 200, "the connect page shows");
    let mut form: Vec<(String, String)> = connect_url.query_pairs().into_owned().collect();
    form.push(("action".into(), "connect".into()));
    let resp = http
        .post(format!("{}/outposts/connect", emu.base_url()))
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.status(),
        302,
        "{}",
        resp.text().await.unwrap_or_default()
    );
    resp.headers()["location"].to_str().unwrap().to_owned()
}

/// A loopback callback URL on a free port, registered with the emulator.
fn registered_callback(emu: &emulator::Emulator) -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/devin/outpost-callback");
    emu.allow_callback(&url);
    url
}

async fn list_with(base: &str, token: &str) -> Vec<fleet::Outpost> {
    FleetClient::new(base, Secret::new(token), ClientOptions::default())
        .unwrap()
        .list_outposts()
        .await
        .unwrap()
}

/// The default callback is one fixed URL (so it can be allowlisted once):
/// the same on two runs. A code Devin refuses (`invalid_grant`) ends that
/// attempt; the command says so and starts again from a new verifier, on
/// the same callback URL.
#[tokio::test]
async fn the_default_callback_is_fixed_and_a_refused_code_starts_again() {
    let emu = common::emulator().await;
    let home = Home::new();
    let mut run = Connecting::start(&home, &emu, &["--outpost-name", "fixed-cb"]).await;
    assert_eq!(
        run.callback_url().as_str(),
        fleet::pkce::DEFAULT_CALLBACK_URL
    );
    let first_challenge = run.param("code_challenge").unwrap();
    let mut bogus = run.callback_url();
    bogus.set_query(Some("code=code_bogus"));
    let landing = no_redirects().get(bogus).send().await.unwrap();
    assert!(
        landing
            .text()
            .await
            .unwrap()
            .contains("Devin refused the code")
    );
    run.next_connect_url().await;
    assert_eq!(
        run.callback_url().as_str(),
        fleet::pkce::DEFAULT_CALLBACK_URL
    );
    assert_ne!(run.param("code_challenge").unwrap(), first_challenge);
    let location = approve(&emu, &run.connect_url).await;
    no_redirects().get(&location).send().await.unwrap();
    let ran = run.finish().await.ok();
    assert!(ran.stderr.contains("invalid_grant"), "{ran:#?}");
    assert!(
        ran.stderr
            .contains("starting again with a new verifier (attempt 2 of 3)"),
        "{ran:#?}"
    );
    assert!(home.credentials_path().exists());

    // A second run: the same callback URL.
    let home = Home::new();
    let run = Connecting::start(&home, &emu, &["--timeout-secs", "1"]).await;
    assert_eq!(
        run.callback_url().as_str(),
        fleet::pkce::DEFAULT_CALLBACK_URL
    );
    run.finish().await.failed();
}

#[tokio::test]
async fn browser_flow_saves_a_working_token_and_never_prints_it() {
    let emu = common::emulator().await;
    let home = Home::new();
    let registered = registered_callback(&emu);
    let image = "https://partner.example.com/logo.png";
    let run = Connecting::start(
        &home,
        &emu,
        &[
            "--outpost-name",
            "lab-e2e",
            "--callback-url",
            &registered,
            "--outpost-image",
            image,
        ],
    )
    .await;
    assert_eq!(run.param("outpost_name").as_deref(), Some("lab-e2e"));
    assert_eq!(run.param("platform").as_deref(), Some("linux"));
    assert_eq!(run.param("outpost_image").as_deref(), Some(image));
    assert_eq!(run.param("code_challenge").map(|c| c.len()), Some(43));
    let callback = run.callback_url();
    assert_eq!(callback.as_str(), registered);

    let http = no_redirects();
    // Another path on the listener is refused, and the command keeps
    // waiting.
    let mut forged = callback.clone();
    forged.set_path("/callback/forged");
    forged.set_query(Some("code=forged"));
    let status = http.get(forged).send().await.unwrap().status();
    assert_eq!(status, 404);

    // The browser: the admin clicks Connect, and is sent to the callback.
    let location = approve(&emu, &run.connect_url).await;
    assert!(location.starts_with(callback.as_str()), "{location}");
    let landing = http.get(&location).send().await.unwrap();
    assert_eq!(landing.status(), 200);
    let html = landing.text().await.unwrap();
    assert!(html.contains("You can close this tab"), "{html}");

    let ran = run.finish().await.ok();
    let path = home.credentials_path();
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(&home.config_dir()), 0o700);
    let saved: Credentials = load_credentials(&path).unwrap().expect("credentials saved");
    // The API base is the one the token answer named (`api_base_url`).
    assert_eq!(saved.api_url, emu.base_url());
    let outpost_id = saved.outpost_id.clone().expect("outpost id saved");
    let token = saved.token.expose();
    assert!(token.starts_with("cog_"));
    assert!(
        !ran.all().contains(token),
        "the token was printed:\n{ran:#?}"
    );
    assert!(ran.stdout.contains(&outpost_id), "{}", ran.stdout);
    assert!(ran.stdout.contains(&path.display().to_string()));
    assert!(ran.stdout.contains("garrison serve"));

    // The token works: directly, and through `garrison outposts list`,
    // which finds it (and the API URL) in the credentials file.
    let outposts = list_with(&emu.base_url(), token).await;
    assert!(outposts.iter().any(|o| o.metadata.outpost_id == outpost_id
        && o.spec.name == "lab-e2e"
        && o.spec.platform == Platform::Linux));
    let listed = home.run(&["outposts", "list"], &[], None).await.ok();
    assert!(listed.stdout.contains(&outpost_id), "{listed:#?}");
    assert!(!listed.all().contains(token));
    // It serves, and it does no more: `connect --manual` takes it.
    let ran = home
        .run(
            &[
                "connect",
                "--manual",
                "--outpost",
                &outpost_id,
                "--api-url",
                &emu.base_url(),
            ],
            &[],
            Some(&format!("{token}\n")),
        )
        .await
        .ok();
    assert!(ran.stdout.contains("The token works"), "{ran:#?}");
}

/// `invalid_grant` is terminal for a verifier; after the last attempt the
/// command stops, says what happened and saves nothing.
#[tokio::test]
async fn rejected_codes_end_after_the_last_attempt_and_save_nothing() {
    let emu = common::emulator().await;
    let home = Home::new();
    let registered = registered_callback(&emu);
    let mut run = Connecting::start(&home, &emu, &["--callback-url", &registered]).await;
    for attempt in 1..=3 {
        if attempt > 1 {
            run.next_connect_url().await;
        }
        let mut callback = run.callback_url();
        callback.set_query(Some("code=code_bogus"));
        let landing = no_redirects().get(callback).send().await.unwrap();
        assert!(landing.text().await.unwrap().contains("refused"));
    }
    let ran = run.finish().await.failed();
    assert!(
        ran.stderr.contains("Devin refused the code (invalid_grant: Invalid or expired connection code) on 3 attempts"),
        "{ran:#?}"
    );
    assert!(ran.stderr.contains("garrison connect --manual"), "{ran:#?}");
    assert!(!home.credentials_path().exists());
}

/// A callback URL that is not on the allowlist: Devin's page refuses it
/// (no redirect), and the command, left waiting, says what to do.
#[tokio::test]
async fn a_callback_not_on_the_allowlist_is_explained() {
    let emu = common::emulator().await;
    let home = Home::new();
    let unlisted = "http://127.0.0.1:9/not-registered";
    let run = Connecting::start(
        &home,
        &emu,
        &["--callback-url", unlisted, "--timeout-secs", "1"],
    )
    .await;
    let page = no_redirects()
        .get(run.connect_url.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 400);
    assert!(page.text().await.unwrap().contains("allowlist"));
    let ran = run.finish().await.failed();
    for needle in [
        "allowlist",
        "Cognition",
        unlisted,
        "--callback-url",
        "garrison connect --manual",
    ] {
        assert!(ran.stderr.contains(needle), "no {needle:?}: {ran:#?}");
    }
}

/// A taken outpost name is refused on Devin's page; when the refusal comes
/// back to the callback, the command names it and the way forward.
#[tokio::test]
async fn a_taken_name_is_refused_with_the_way_forward() {
    let emu = common::emulator().await;
    emu.create_outpost("taken-name", Platform::Linux);
    let home = Home::new();
    let registered = registered_callback(&emu);
    let run = Connecting::start(
        &home,
        &emu,
        &[
            "--callback-url",
            &registered,
            "--outpost-name",
            "taken-name",
        ],
    )
    .await;
    let mut form: Vec<(String, String)> = run.connect_url.query_pairs().into_owned().collect();
    form.push(("action".into(), "connect".into()));
    let resp = no_redirects()
        .post(format!("{}/outposts/connect", emu.base_url()))
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 409);
    assert!(resp.text().await.unwrap().contains("already taken"));
    let mut refused = run.callback_url();
    refused.set_query(Some(
        "error=invalid_request&error_description=Outpost+name+already+taken",
    ));
    no_redirects().get(refused).send().await.unwrap();
    let ran = run.finish().await.failed();
    assert!(
        ran.stderr.contains("Devin refused the outpost name"),
        "{ran:#?}"
    );
    assert!(ran.stderr.contains("garrison connect --manual"), "{ran:#?}");
    assert!(!home.credentials_path().exists());
}

#[tokio::test]
async fn a_denied_approval_fails_clearly() {
    let emu = common::emulator().await;
    let home = Home::new();
    let registered = registered_callback(&emu);
    let run = Connecting::start(&home, &emu, &["--callback-url", &registered]).await;
    let mut callback = run.callback_url();
    callback.set_query(Some("error=access_denied"));
    no_redirects().get(callback).send().await.unwrap();
    let ran = run.finish().await.failed();
    assert!(ran.stderr.contains("not approved"), "{ran:#?}");
    assert!(!home.credentials_path().exists());
}

#[tokio::test]
async fn no_browser_answer_times_out_with_a_way_forward() {
    let emu = common::emulator().await;
    let home = Home::new();
    let registered = registered_callback(&emu);
    let run = Connecting::start(
        &home,
        &emu,
        &["--timeout-secs", "1", "--callback-url", &registered],
    )
    .await;
    let ran = run.finish().await.failed();
    assert!(
        ran.stderr.contains("no answer from the browser within 1 s"),
        "{ran:#?}"
    );
    assert!(ran.stderr.contains("--manual"), "{ran:#?}");
    assert!(!home.credentials_path().exists());
}

#[tokio::test]
async fn manual_saves_a_piped_token_after_checking_it() {
    let emu = common::emulator().await;
    let home = Home::new();
    let outpost = emu.create_outpost("manual-lab", Platform::Linux);
    let token = emu.mint_token(&[emulator::SCOPE_MACHINE]);
    let base = emu.base_url();
    let ran = home
        .run(
            &[
                "connect",
                "--manual",
                "--outpost",
                &outpost,
                "--api-url",
                &base,
            ],
            &[],
            Some(&format!("{token}\n")),
        )
        .await
        .ok();
    assert!(!ran.all().contains(&token), "{ran:#?}");
    // A machine token cannot read the outpost (orchestrator scope): it is
    // checked through its queue, and an empty queue is a warning only.
    assert!(ran.stdout.contains("queue answered"), "{ran:#?}");
    assert!(
        ran.stderr.contains(&format!(
            "Warning: outpost {outpost} could not be confirmed"
        )),
        "{ran:#?}"
    );
    let path = home.credentials_path();
    assert_eq!(mode(&path), 0o600);
    let saved = load_credentials(&path).unwrap().unwrap();
    assert_eq!(
        saved,
        Credentials {
            api_url: base,
            outpost_id: Some(outpost.clone()),
            token: Secret::new(token),
        }
    );

    // With the orchestrator scope, the outpost itself is read.
    let ran = home
        .run(
            &[
                "connect",
                "--manual",
                "--outpost",
                &outpost,
                "--api-url",
                &emu.base_url(),
            ],
            &[],
            Some(&format!("{}\n", emu.account_token())),
        )
        .await
        .ok();
    assert!(ran.stdout.contains("manual-lab"), "{ran:#?}");
    assert!(!ran.stderr.contains("Warning"), "{ran:#?}");
}

#[tokio::test]
async fn manual_refuses_bad_tokens_and_unknown_outposts() {
    let emu = common::emulator().await;
    let home = Home::new();
    let outpost = emu.create_outpost("manual-bad", Platform::Linux);
    let base = emu.base_url();
    let manual = |outpost: String| {
        vec![
            "connect".to_owned(),
            "--manual".to_owned(),
            "--outpost".to_owned(),
            outpost,
            "--api-url".to_owned(),
            base.clone(),
        ]
    };
    let run = |args: Vec<String>, token: String| {
        let home = &home;
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            home.run(&args, &[], Some(&format!("{token}\n")))
                .await
                .failed()
        }
    };

    let ran = run(manual(outpost.clone()), "cog_not_a_real_token".into()).await;
    assert!(ran.stderr.contains("the token was rejected"), "{ran:#?}");
    assert!(!ran.all().contains("cog_not_a_real_token"));

    let scopeless = emu.mint_token(&[]);
    let ran = run(manual(outpost.clone()), scopeless.clone()).await;
    assert!(ran.stderr.contains("account.outposts.machine"), "{ran:#?}");
    assert!(!ran.all().contains(&scopeless));

    let token = emu.account_token();
    let ran = run(manual("outpost_env-nosuch".into()), token.clone()).await;
    assert!(ran.stderr.contains("no such outpost"), "{ran:#?}");

    let ran = run(manual(outpost), String::new()).await;
    assert!(ran.stderr.contains("no token"), "{ran:#?}");

    assert!(!home.credentials_path().exists());
}
