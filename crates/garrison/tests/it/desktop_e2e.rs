//! A desktop session end to end on the local backend, on the image of the
//! built-in `desktop` recipe (scripts/test-images builds it): the remote
//! gets `DISPLAY` and `DEVIN_OUTPOST_DESKTOP=true`; Garrison starts the X
//! server again after a step kills it (and says so in the session's event
//! log); then a step opens a solid #00ff00 page in the image's Chromium on
//! that display and captures the screen with `xwd`, and this test finds
//! the window's title on the display and the page's green in the captured
//! pixels (the XWD file parsed here).

use std::io::Read;

use base64::Engine;

use crate::common::*;
use emulator::Then;
use fleet::SessionStatus;

/// The image scripts/test-images builds with `--recipe desktop`.
const IMAGE: &str = "desktop";
const TITLE: &str = "Garrison green page";

/// Kills the X server, waits for it to be gone, then for Garrison to have
/// started it again (each wait bounded, so a broken desktop fails the step
/// rather than hanging it).
const KILL_X: &str = r#"pkill -KILL -x Xvfb || { echo "no Xvfb to kill"; exit 1; }
i=0; while xdpyinfo >/dev/null 2>&1; do i=$((i+1)); [ $i -gt 300 ] && { echo "still answering"; exit 1; }; sleep 0.1; done
i=0; until xdpyinfo >/dev/null 2>&1; do i=$((i+1)); [ $i -gt 1200 ] && { echo "not back"; exit 1; }; sleep 0.1; done
echo back"#;

/// Opens the page in Chromium on `$DISPLAY` (a real window, not headless)
/// and prints the display's line for its window once it is there.
fn open_page() -> String {
    format!(
        r#"printf '<html><head><title>{TITLE}</title></head><body style="margin:0;background:#00ff00"></body></html>' > /tmp/green.html
"$DEVIN_CHROME_PATH" --no-sandbox --no-first-run --disable-gpu --kiosk --user-data-dir=/tmp/chromium-profile file:///tmp/green.html >/tmp/chromium.log 2>&1 &
i=0; until xwininfo -root -tree | grep -a '{TITLE}'; do i=$((i+1)); if [ $i -gt 1200 ]; then echo "no window"; tail -20 /tmp/chromium.log; exit 1; fi; sleep 0.1; done"#
    )
}

/// Captures the whole screen once the page is painted (green pixels,
/// 0x??00ff00 as little-endian 32-bit words, the top byte unused, make up
/// a quarter of it; the wait is bounded), and prints it gzipped in base64.
const CAPTURE: &str = r#"i=0; while :; do
  xwd -root -silent > /tmp/screen.xwd
  hs=$(od -An -N4 -tu1 /tmp/screen.xwd | awk '{print $1*16777216+$2*65536+$3*256+$4}')
  nc=$(od -An -j76 -N4 -tu1 /tmp/screen.xwd | awk '{print $1*16777216+$2*65536+$3*256+$4}')
  n=$(tail -c +$((hs + nc*12 + 1)) /tmp/screen.xwd | od -An -v -tx4 -w4 | grep -c '..00ff00$')
  [ "$n" -gt 500000 ] && break
  i=$((i+1)); [ $i -gt 120 ] && break
  sleep 0.5
done
gzip -9c /tmp/screen.xwd | base64 -w0"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_desktop_session_shows_a_page_in_chromium_and_keeps_its_display() {
    if desktop_test_images(IMAGE).is_none() {
        return;
    }
    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let g = Garrison::start_on(
        &emu,
        GarrisonOptions {
            outpost: &outpost,
            state_dir: &state,
            extra_args: vec!["--image".into(), IMAGE.into(), "--desktop".into()],
        },
        Backend::Local,
    );

    let id = session(
        &emu,
        &outpost,
        vec![run("env"), run(KILL_X), run(&open_page()), run(CAPTURE)],
        Then::End,
    );
    wait_until("terminated and released", Some(&g), || {
        status_is(&emu, &id, SessionStatus::Terminated) && released(&emu, &id)
    })
    .await;

    let outputs = step_outputs(&emu, &id);
    assert_eq!(outputs.len(), 4, "{outputs:?}");
    let env: std::collections::BTreeMap<&str, &str> = outputs[0]
        .lines()
        .filter_map(|line| line.split_once('='))
        .collect();
    assert_eq!(env.get("DISPLAY").copied(), Some(":99"), "{env:?}");
    assert_eq!(env.get("DEVIN_OUTPOST_DESKTOP").copied(), Some("true"));
    assert_eq!(outputs[1].trim(), "back", "{}", outputs[1]);
    let events = g.store().events(&sid(&id), 0).unwrap();
    assert!(
        events.iter().any(|e| e.kind == "desktop_restarted"),
        "{:?}",
        events.iter().map(|e| &e.kind).collect::<Vec<_>>()
    );
    assert!(
        outputs[2].contains(TITLE),
        "the display's windows: {}",
        outputs[2]
    );

    let gzipped = base64::engine::general_purpose::STANDARD
        .decode(outputs[3].trim())
        .unwrap_or_else(|e| panic!("{e}: {}", &outputs[3][..outputs[3].len().min(500)]));
    let mut xwd = Vec::new();
    flate2::read::GzDecoder::new(&gzipped[..])
        .read_to_end(&mut xwd)
        .unwrap();
    let screen = Xwd::parse(&xwd);
    assert_eq!((screen.width, screen.height), (1920, 1080));
    let green = screen.pixels().filter(|&p| p == (0, 0xff, 0)).count();
    let all = (screen.width * screen.height) as usize;
    assert!(
        green * 2 > all,
        "{green} of {all} pixels are #00ff00: the page did not fill the screen"
    );
}

/// An XWD screen capture (X11/XWDFile.h): a header of big-endian 32-bit
/// fields, the window name, a colour map, then the pixels in the byte
/// order and with the channel masks the header gives. Only the
/// 32-bits-per-pixel TrueColor form Xvfb's 24-bit screen produces.
struct Xwd<'a> {
    width: u32,
    height: u32,
    bytes_per_line: usize,
    lsb_first: bool,
    masks: [u32; 3],
    data: &'a [u8],
}

impl<'a> Xwd<'a> {
    fn parse(file: &'a [u8]) -> Self {
        let field = |i: usize| u32::from_be_bytes(file[i * 4..i * 4 + 4].try_into().unwrap());
        let header_size = field(0) as usize;
        assert_eq!(field(1), 7, "XWD version");
        assert_eq!(field(11), 32, "bits per pixel");
        let ncolors = field(19) as usize;
        let start = header_size + ncolors * 12;
        Self {
            width: field(4),
            height: field(5),
            bytes_per_line: field(12) as usize,
            lsb_first: field(7) == 0,
            masks: [field(14), field(15), field(16)],
            data: &file[start..],
        }
    }

    /// Every pixel as (red, green, blue).
    fn pixels(&self) -> impl Iterator<Item = (u8, u8, u8)> + '_ {
        let channel = |value: u32, mask: u32| ((value & mask) >> mask.trailing_zeros()) as u8;
        (0..self.height as usize).flat_map(move |y| {
            (0..self.width as usize).map(move |x| {
                let at = y * self.bytes_per_line + x * 4;
                let word: [u8; 4] = self.data[at..at + 4].try_into().unwrap();
                let value = match self.lsb_first {
                    true => u32::from_le_bytes(word),
                    false => u32::from_be_bytes(word),
                };
                let [r, g, b] = self.masks;
                (channel(value, r), channel(value, g), channel(value, b))
            })
        })
    }
}
