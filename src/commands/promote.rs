//! `gate promote LOOP GATE`: the core's promotion ([`crate::ops::promote`])
//! as this process's actor, said in a line (with its evidence) or as JSON.

use std::io::Write;

use super::render::safe;
use crate::cli::PromoteArgs;
use crate::error::{Exit, Result};
use crate::history::{Promotion, Replaced};
use crate::ops::promote::{self, Promote};
use crate::root::Root;
use crate::store::Stores;

pub(super) fn run(root: &Root, args: &PromoteArgs, out: &mut dyn Write) -> Result<Exit> {
    let stores = Stores::open(root)?;
    let req = Promote {
        name: args.name.clone(),
        gate: args.gate.clone(),
        remove: args.remove,
        force: args.force,
        min: args.min,
        wait: args.wait.wait(),
    };
    promote::promote(
        &super::ops::ctx(root, &stores),
        req,
        &mut |p| match args.json.json {
            true => super::emit_json(out, p),
            false => super::emit(out, &said(&args.name, p)),
        },
    )?;
    Ok(Exit::Ok)
}

/// The promotion in lines, each as [`safe`] shows text.
fn said(name: &str, p: &Promotion) -> String {
    let mut text = format!(
        "promoted gate {} of loop {name}: {} of its last {} evaluations agreed",
        p.gate, p.agreed, p.evaluations
    );
    if p.forced {
        text += " (forced)";
    }
    match (&p.replaced, p.now) {
        (Some(r), Some(Replaced::Removed)) => text += &format!("; {r} was removed"),
        (Some(r), _) => text += &format!("; {r} is a shadow now"),
        (None, _) => text += "; it replaces no gate",
    }
    let mut text = format!("{}\n", safe(&text));
    for d in &p.disagreements {
        text += &format!(
            "  {}\n",
            safe(&format!(
                "disagreed at tick {} ({}): {} said {}, it said {}",
                d.tick,
                d.phase,
                d.live_gate,
                d.live.name(),
                d.shadow.name()
            ))
        );
    }
    text
}
