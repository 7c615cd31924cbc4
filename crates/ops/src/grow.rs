//! Growing an array onto bigger members (`stripeguard grow`, FORMAT.md §2 "Growing the
//! array"): the size asked for as stripes, the grow itself here or in the process holding the
//! array (FORMAT.md §3: `grow max` or `grow BYTES`, run on a thread of the holder's while it
//! goes on serving, progress and outcome in its `status` replies).

use crate::LiveStatus;
use std::sync::Mutex;
use stripeguard_engine::{Array, EngineError, Grown};

/// The size `grow` is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GrowTo {
    /// As many stripes as every member has room for.
    Max,
    /// This many bytes of array (rounded down to whole stripes).
    Bytes(u64),
}

impl GrowTo {
    /// The word the control socket carries (`max`, or the bytes).
    fn word(self) -> String {
        match self {
            GrowTo::Max => "max".into(),
            GrowTo::Bytes(b) => b.to_string(),
        }
    }

    fn from_word(w: &str) -> Option<GrowTo> {
        match w {
            "max" => Some(GrowTo::Max),
            b => b.parse().ok().map(GrowTo::Bytes),
        }
    }
}

/// The stripe count `to` asks for on `array`, or why it cannot be had.
pub fn target_stripes(array: &Array, to: GrowTo) -> Result<u64, String> {
    let g = array.geometry();
    let sd = g.stripe_data_bytes();
    match to {
        GrowTo::Max => Ok(array.stripes_that_fit().max(g.stripes)),
        GrowTo::Bytes(b) if b < g.capacity_bytes() => Err(format!(
            "{b} bytes is smaller than the array ({} bytes): an array does not shrink",
            g.capacity_bytes()
        )),
        GrowTo::Bytes(b) => Ok(b / sd),
    }
}

/// Grow `array` as `to` asks; `progress(done, total)` over the stripes written (none when the
/// new stripes are zero stripes).
pub fn grow_array(
    array: &Array,
    to: GrowTo,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Grown, EngineError> {
    let stripes = target_stripes(array, to).map_err(EngineError::Config)?;
    array.grow(stripes, progress)
}

/// What a grow of `array` did, in words.
pub fn grown_line(g: &Grown, array: &Array) -> String {
    let stripe_data_bytes = array.geometry().stripe_data_bytes();
    if g.from_stripes == g.to_stripes {
        let (smallest, size) = array.smallest_member();
        return format!(
            "the array already has {} stripes ({} bytes): nothing to grow ({smallest}, the smallest member, holds {size} bytes: every member needs room for more stripes first)",
            g.to_stripes, g.capacity_bytes
        );
    }
    format!(
        "grown from {} to {} bytes ({} to {} stripes){}",
        g.from_stripes * stripe_data_bytes,
        g.capacity_bytes,
        g.from_stripes,
        g.to_stripes,
        if g.as_zero_stripes {
            "; the new stripes are zero stripes (nothing written)"
        } else {
            "; every new unit written"
        }
    )
}

/// A grow run by the holder of the array.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct LiveGrow {
    pub running: bool,
    /// Stripes written, and in all (0 of 0 when the new stripes are zero stripes).
    pub done: u64,
    pub total: u64,
    /// When finished: what it did, or why it failed.
    pub outcome: Option<String>,
    pub ok: bool,
    /// Array bytes before and after (after: when it finished).
    pub from_bytes: u64,
    pub to_bytes: u64,
}

/// The holder's grow.
#[derive(Default)]
pub(crate) struct GrowSlot {
    pub(crate) state: Mutex<Option<LiveGrow>>,
}

impl GrowSlot {
    pub(crate) fn running(&self) -> bool {
        self.state
            .lock()
            .expect("lock")
            .as_ref()
            .is_some_and(|s| s.running)
    }
}

/// `grow max|BYTES`: check it and start the grow on a thread of the holder's scope.
pub(crate) fn start_grow<'scope>(
    array: &'scope Array,
    req: &str,
    slot: &'scope GrowSlot,
    scope: &'scope std::thread::Scope<'scope, '_>,
) -> Result<(), String> {
    let to = req
        .strip_prefix("grow ")
        .and_then(GrowTo::from_word)
        .ok_or("grow max|BYTES: give `max` or a number of bytes")?;
    if !array.is_writable() {
        return Err("this holder has the array read-only".into());
    }
    if slot.running() {
        return Err("a grow is already running in this holder".into());
    }
    // Refusals (too small, a member out, shrinking) answer the request itself.
    let stripes = target_stripes(array, to)?;
    *slot.state.lock().expect("lock") = Some(LiveGrow {
        running: true,
        from_bytes: array.capacity_bytes(),
        ..LiveGrow::default()
    });
    scope.spawn(move || {
        let result = array.grow(stripes, &mut |done, total| {
            if let Some(s) = slot.state.lock().expect("lock").as_mut() {
                s.done = done;
                s.total = total;
            }
        });
        let mut st = slot.state.lock().expect("lock");
        let s = st.as_mut().expect("set above");
        s.running = false;
        s.to_bytes = array.capacity_bytes();
        match result {
            Ok(g) => {
                s.ok = true;
                s.outcome = Some(grown_line(&g, array));
            }
            Err(e) => s.outcome = Some(e.to_string()),
        }
    });
    Ok(())
}

/// Ask the process holding array `uuid` to grow it while it serves; progress and the outcome
/// come with its `status` ([`LiveStatus::grow`]).
pub fn ask_holder_grow(uuid: &[u8; 16], to: GrowTo) -> Result<(), String> {
    crate::ask_holder_to(uuid, &format!("grow {}", to.word()))
}

/// Follow the holder's grow until it finishes, `progress(done, total)` as it goes; its last
/// state.
pub fn follow_holder_grow(
    uuid: &[u8; 16],
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(LiveGrow, LiveStatus), String> {
    crate::online::follow_holder(
        uuid,
        (
            "grow",
            "it grew the array",
            "; `stripeguard status` says which size the array has, and `grow` again finishes it",
        ),
        |l| l.grow.clone().map(|g| ((g.done, g.total, g.running), g)),
        progress,
    )
}
