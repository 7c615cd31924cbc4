//! Progress bars on stderr (drawn only when stderr is a terminal).

use indicatif::{ProgressBar, ProgressStyle};

/// A byte-count bar with a label.
pub fn bytes_bar(label: &str) -> ProgressBar {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template(
            "{prefix} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .expect("static template")
        .progress_chars("=> "),
    );
    bar.set_prefix(label.to_string());
    bar
}

/// A callback updating `bar` with (done, total).
pub fn updater(bar: &ProgressBar) -> impl FnMut(u64, u64) + '_ {
    move |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    }
}

/// A count bar (`done/total items`) with a label.
pub fn count_bar(label: &str) -> ProgressBar {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{prefix} [{bar:40}] {pos}/{len} eta {eta}")
            .expect("static template")
            .progress_chars("=> "),
    );
    bar.set_prefix(label.to_string());
    bar
}
