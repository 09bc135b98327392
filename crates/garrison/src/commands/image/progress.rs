//! The progress of a local image build or import: a bar on a terminal,
//! plain lines otherwise (logs, CI), nothing with `-q`.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ::local::images::{NoProgress, Progress};
use indicatif::{ProgressBar, ProgressStyle};

use super::table::human_size;

/// A progress bar on a terminal, plain lines otherwise (logs, CI).
pub(super) trait Reporter: Progress {
    /// Itself, as the store takes it.
    fn as_progress(&self) -> &dyn Progress;
    /// Clears the bar, if any.
    fn finish(&self);
}

/// The display that fits stderr.
pub(super) fn progress() -> Box<dyn Reporter> {
    if crate::verbosity::quiet() {
        Box::new(NoProgress)
    } else if std::io::stderr().is_terminal() {
        Box::new(Bar::new())
    } else {
        Box::new(Lines::default())
    }
}

/// An indicatif bar (indicatif: the maintained terminal progress crate):
/// a spinner with the latest tool output, or bytes against a total.
struct Bar {
    bar: ProgressBar,
    /// Whether the style shows bytes against a total right now.
    counting: Mutex<bool>,
}

impl Bar {
    fn new() -> Self {
        let bar = ProgressBar::new_spinner();
        bar.enable_steady_tick(Duration::from_millis(120));
        let this = Self {
            bar,
            counting: Mutex::new(true),
        };
        this.spinner();
        this
    }

    fn spinner(&self) {
        let mut counting = self.counting.lock().unwrap();
        if *counting {
            self.bar.set_style(
                ProgressStyle::with_template("{spinner} {prefix:>10} {elapsed:>4} {wide_msg}")
                    .expect("valid template"),
            );
            *counting = false;
        }
    }
}

impl Progress for Bar {
    fn stage(&self, what: &str) {
        self.spinner();
        self.bar.set_prefix(what.to_owned());
        self.bar.set_message("");
        self.bar.set_position(0);
    }

    fn bytes(&self, done: u64, total: Option<u64>) {
        match total {
            Some(total) => {
                let mut counting = self.counting.lock().unwrap();
                if !*counting {
                    self.bar.set_style(
                        ProgressStyle::with_template(
                            "{prefix:>12} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {eta}",
                        )
                        .expect("valid template")
                        .progress_chars("=> "),
                    );
                    *counting = true;
                }
                self.bar.set_length(total);
                self.bar.set_position(done);
            }
            None => self.bar.set_message(human_size(done)),
        }
    }

    fn detail(&self, line: &str) {
        self.bar.set_message(line.to_owned());
    }
}

impl Reporter for Bar {
    fn as_progress(&self) -> &dyn Progress {
        self
    }
    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// `-q`: none.
impl Reporter for NoProgress {
    fn as_progress(&self) -> &dyn Progress {
        self
    }
    fn finish(&self) {}
}

/// One line per stage, and a bytes line at most every 5 seconds.
#[derive(Default)]
struct Lines {
    last_bytes: Mutex<Option<Instant>>,
}

impl Progress for Lines {
    fn stage(&self, what: &str) {
        eprintln!("garrison image: {what}");
        *self.last_bytes.lock().unwrap() = Some(Instant::now());
    }

    fn bytes(&self, done: u64, total: Option<u64>) {
        let mut last = self.last_bytes.lock().unwrap();
        if last.is_some_and(|t| t.elapsed() < Duration::from_secs(5)) {
            return;
        }
        *last = Some(Instant::now());
        match total {
            Some(total) => eprintln!(
                "garrison image:   {} of {}",
                human_size(done),
                human_size(total)
            ),
            None => eprintln!("garrison image:   {}", human_size(done)),
        }
    }
}

impl Reporter for Lines {
    fn as_progress(&self) -> &dyn Progress {
        self
    }
    fn finish(&self) {}
}
