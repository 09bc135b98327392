//! `garrison connect` as a program, against the in-process emulator: the
//! test plays the browser (it reads the printed connect URL, lets the
//! emulator's connect page approve, and follows its redirect to the local
//! callback), and `--manual` with a token piped on stdin.

mod cli;
mod common;

use cli::{HANG_GUARD, Home, Ran, mode};
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

async fn list_with(base: &str, token: &str) -> Vec<fleet::Outpost> {
    FleetClient::new(base, Secret::new(token), ClientOptions::default())
        .unwrap()
        .list_outposts()
        .await
        .unwrap()
}

#[tokio::test]
async fn browser_flow_saves_a_working_token_and_never_prints_it() {
    let emu = common::emulator().await;
    let home = Home::new();
    let run = Connecting::start(&home, &emu, &["--outpost-name", "lab-e2e"]).await;
    assert_eq!(run.param("outpost_name").as_deref(), Some("lab-e2e"));
    assert_eq!(run.param("platform").as_deref(), Some("linux"));
    assert_eq!(run.param("code_challenge").map(|c| c.len()), Some(43));
    let callback = run.callback_url();
    assert_eq!(callback.host_str(), Some("127.0.0.1"));

    let http = no_redirects();
    // A request that does not know the callback's secret path is refused,
    // and the command keeps waiting.
    let mut forged = callback.clone();
    forged.set_path("/callback/forged");
    forged.set_query(Some("code=forged"));
    let status = http.get(forged).send().await.unwrap().status();
    assert_eq!(status, 404);

    // The browser: the connect page approves and redirects to the callback.
    let approve = http.get(run.connect_url.clone()).send().await.unwrap();
    assert_eq!(approve.status(), 302);
    let location = approve.headers()["location"].to_str().unwrap().to_owned();
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
}

#[tokio::test]
async fn a_rejected_code_fails_clearly_and_saves_nothing() {
    let emu = common::emulator().await;
    let home = Home::new();
    let run = Connecting::start(&home, &emu, &[]).await;
    let mut callback = run.callback_url();
    callback.set_query(Some("code=code_bogus"));
    let landing = no_redirects().get(callback).send().await.unwrap();
    assert!(landing.text().await.unwrap().contains("could not connect"));
    let ran = run.finish().await.failed();
    assert!(
        ran.stderr
            .contains("the code was rejected or already used; run `garrison connect` again"),
        "{ran:#?}"
    );
    assert!(!home.credentials_path().exists());
}

#[tokio::test]
async fn a_denied_approval_fails_clearly() {
    let emu = common::emulator().await;
    let home = Home::new();
    let run = Connecting::start(&home, &emu, &[]).await;
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
    let run = Connecting::start(&home, &emu, &["--timeout-secs", "1"]).await;
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
    assert!(ran.stdout.contains("manual-lab"), "{ran:#?}");
    let path = home.credentials_path();
    assert_eq!(mode(&path), 0o600);
    let saved = load_credentials(&path).unwrap().unwrap();
    assert_eq!(
        saved,
        Credentials {
            api_url: base,
            outpost_id: Some(outpost),
            token: Secret::new(token),
        }
    );
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
