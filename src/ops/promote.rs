//! `gate promote`: a shadow gate goes live, on its evidence. The gate it
//! was compared with (the live gate of the same name it was recorded
//! beside) becomes a shadow, or goes with `remove`. Refused unless at
//! least `min` of its last evaluations agreed with the live side, unless
//! forced (and recorded as forced). loop.toml is edited in place, its
//! comments and layout kept, under the loop's lock; the commit records the
//! change to the rules (so `[approval] config_changes = "await"` makes the
//! next tick await an approval of it) and a `gate-promoted` event with who
//! did it and the evidence. Operators may promote (the loop's roles).

use toml_edit::{DocumentMut, Item, Table};

use super::views::shadow::{Evidence, WINDOW, evidence};
use super::{Answer, Ctx};
use crate::access::Action;
use crate::config::LoopConfig;
use crate::domain::Mode;
use crate::error::{Error, Result};
use crate::history::{Event, EventKind, Promotion, Replaced};
use crate::lock::Wait;
use crate::rules::{self, Current, Via};
use crate::store::LoopStore;

/// Make shadow gate `gate` (as loop.toml writes it) of loop `name` live.
pub(crate) struct Promote {
    pub name: String,
    pub gate: String,
    /// Remove the gate it replaces instead of making it a shadow.
    pub remove: bool,
    /// Promote without enough agreeing evaluations (recorded as forced).
    pub force: bool,
    /// The agreeing evaluations, of its last [`WINDOW`], it needs.
    pub min: usize,
    pub wait: Wait,
}

pub(crate) fn promote(ctx: &Ctx<'_>, req: Promote, answer: Answer<'_, Promotion>) -> Result<Promotion> {
    let dir = ctx.allowed(&req.name, Action::Promote)?;
    let dir = &*dir;
    let original = dir.config_bytes()?;
    let config = LoopConfig::parse(&String::from_utf8_lossy(&original), &dir.config_path())?;
    shadow_gate(&config, &req)?;
    let events = dir.history()?.events;
    let found = evidence(&events, &req.gate, WINDOW);
    let forced = found.agreed < req.min;
    if forced && !req.force {
        return Err(refused(&req, &found));
    }
    let replaced = replaced_gate(&events, &req.gate);
    let edited = edit(&original, &req, replaced.as_deref())?;
    let promotion = Promotion {
        by: ctx.actor.user.clone(),
        gate: req.gate.clone(),
        now: replaced.as_ref().map(|_| {
            if req.remove {
                Replaced::Removed
            } else {
                Replaced::Shadow
            }
        }),
        replaced,
        evaluations: found.evaluations,
        agreed: found.agreed,
        disagreements: found.disagreements,
        forced,
    };
    commit(ctx, dir, &req, &original, &edited, &promotion)?;
    answer(&promotion).map(|()| promotion)
}

/// `req.gate` must be one of the loop's shadow gates.
fn shadow_gate(config: &LoopConfig, req: &Promote) -> Result<()> {
    let mut named = config.gates.iter().filter(|g| g.source.to_string() == req.gate);
    let message = match named
        .clone()
        .find(|g| g.mode == Mode::Shadow)
        .or_else(|| named.next())
    {
        Some(g) if g.mode == Mode::Shadow => return Ok(()),
        Some(_) => format!(
            "gate {} is live already; only a shadow gate is promoted",
            req.gate
        ),
        None => {
            let shadows: Vec<String> = config
                .gates
                .iter()
                .filter(|g| g.mode == Mode::Shadow)
                .map(|g| g.source.to_string())
                .collect();
            format!(
                "has no gate {} (its shadow gates: {})",
                req.gate,
                if shadows.is_empty() {
                    "none".to_owned()
                } else {
                    shadows.join(", ")
                }
            )
        }
    };
    Err(Error::Refused {
        name: req.name.clone(),
        message,
    })
}

fn refused(req: &Promote, found: &Evidence) -> Error {
    Error::Refused {
        name: req.name.clone(),
        message: format!(
            "shadow gate {} has {} agreeing evaluations of its last {} recorded, fewer than the {} a promotion needs; \
             let it run longer, or promote it with --force (recorded as forced)",
            req.gate, found.agreed, found.evaluations, req.min
        ),
    }
}

/// The live gate `gate` was last recorded beside under its own name: the
/// one it replaces.
fn replaced_gate(events: &[Event], gate: &str) -> Option<String> {
    events.iter().rev().find_map(|e| match &e.kind {
        EventKind::Gate { verdict, shadow, .. } => shadow
            .iter()
            .find(|s| s.verdict.gate == gate && s.verdict.pairing_name() == verdict.pairing_name())
            .map(|_| verdict.gate.clone()),
        _ => None,
    })
}

/// loop.toml with `req.gate` live and `replaced` a shadow (or gone), its
/// comments and layout kept.
fn edit(original: &[u8], req: &Promote, replaced: Option<&str>) -> Result<Vec<u8>> {
    let text = String::from_utf8_lossy(original);
    let mut doc: DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| Error::Refused {
        name: req.name.clone(),
        message: format!("loop.toml cannot be edited: {e}"),
    })?;
    let Some(gates) = doc.get_mut("gate").and_then(Item::as_array_of_tables_mut) else {
        return Err(Error::Refused {
            name: req.name.clone(),
            message: "loop.toml's gates are not written as [[gate]] tables; edit it with `automaton edit`"
                .into(),
        });
    };
    let mut remove = None;
    for (i, table) in gates.iter_mut().enumerate() {
        let label = label(table);
        let shadow = table.get("mode").and_then(Item::as_str) == Some("shadow");
        if shadow && label.as_deref() == Some(req.gate.as_str()) {
            table.remove("mode");
        } else if !shadow && label.is_some() && label.as_deref() == replaced {
            if req.remove {
                remove = Some(i);
            } else {
                table.insert("mode", toml_edit::value("shadow"));
            }
        }
    }
    if let Some(i) = remove {
        gates.remove(i);
    }
    Ok(doc.to_string().into_bytes())
}

/// A `[[gate]]` table's gate as loop.toml writes it: `stock:NAME` or its path.
fn label(table: &Table) -> Option<String> {
    if let Some(stock) = table.get("stock").and_then(Item::as_str) {
        return Some(format!("stock:{stock}"));
    }
    table.get("path").and_then(Item::as_str).map(str::to_owned)
}

/// Under the lock: loop.toml replaced (if no one changed it meanwhile), the
/// change to the rules taken in, the promotion recorded.
fn commit(
    ctx: &Ctx<'_>,
    dir: &dyn LoopStore,
    req: &Promote,
    original: &[u8],
    edited: &[u8],
    promotion: &Promotion,
) -> Result<()> {
    ctx.update(dir, "gate promote", req.wait, |state| {
        if dir.config_bytes()? != original {
            return Err(Error::Refused {
                name: req.name.clone(),
                message: "loop.toml changed while the promotion was made; nothing was changed, try again"
                    .into(),
            });
        }
        let now = Current::read(ctx.root.path(), &String::from_utf8_lossy(edited));
        let policy = LoopConfig::parse(&now.text, &dir.config_path())?
            .approval
            .config_changes;
        dir.save_config(edited)?;
        let change = rules::take_in(state, &now, policy, Via::Promote, Some(promotion.by.clone()));
        state
            .shadows_disagreed
            .retain(|g| *g != promotion.gate && Some(g) != promotion.replaced.as_ref());
        let mut events: Vec<EventKind> = change
            .map(|change| EventKind::ConfigChanged { change })
            .into_iter()
            .collect();
        events.push(EventKind::GatePromoted {
            promotion: promotion.clone(),
        });
        Ok(events)
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_edit_keeps_comments_and_swaps_the_modes() {
        let text = "step = \"true\"\n# the live budget\n[[gate]]\nstock = \"budget\" # v1\nparams = { max = 5.0 }\n\n\
                    # the new one, tried in shadow\n[[gate]]\npath = \"gates/budget.wasm\"\nmode = \"shadow\"\n";
        let req = |remove| Promote {
            name: "demo".into(),
            gate: "gates/budget.wasm".into(),
            remove,
            force: false,
            min: 1,
            wait: Wait::No,
        };
        let out =
            String::from_utf8(edit(text.as_bytes(), &req(false), Some("stock:budget")).unwrap()).unwrap();
        assert!(
            out.contains("# the live budget") && out.contains("# v1") && out.contains("# the new one"),
            "{out}"
        );
        let config = LoopConfig::parse(&out, "loop.toml".as_ref()).unwrap();
        let modes: Vec<Mode> = config.gates.iter().map(|g| g.mode).collect();
        assert_eq!(modes, [Mode::Shadow, Mode::Enforce], "{out}");
        let out =
            String::from_utf8(edit(text.as_bytes(), &req(true), Some("stock:budget")).unwrap()).unwrap();
        let config = LoopConfig::parse(&out, "loop.toml".as_ref()).unwrap();
        assert_eq!(config.gates.len(), 1, "{out}");
        assert_eq!(config.gates[0].mode, Mode::Enforce);
    }
}
