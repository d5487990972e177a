//! An example gate: halts the loop when its step exits with one of the codes
//! listed in the params, so a step can say "stop, I need a human" by its exit
//! code. Params: `{"codes": [3]}`.

use serde::Deserialize;

// Bindings for the world `gate` from the WIT in ./wit (a copy of the
// interface automaton ships). The world's exports become the `Guest` trait;
// the types the world `use`s (`Context`, `Decision`, `GateInfo`) are defined
// at this level, the rest are under `automaton::gate::types`.
wit_bindgen::generate!({
    world: "gate",
    path: "wit",
});

use automaton::gate::host::log;
use automaton::gate::types::Level;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    /// The exit codes that halt the loop.
    codes: Vec<i32>,
}

fn parse(params: &str) -> Result<Params, String> {
    let params: Params =
        serde_json::from_str(params).map_err(|e| format!("invalid params: {e}"))?;
    if params.codes.is_empty() {
        return Err(String::from(
            "invalid params: codes: list at least one exit code",
        ));
    }
    Ok(params)
}

struct ExitCodeGate;

impl Guest for ExitCodeGate {
    fn describe() -> GateInfo {
        GateInfo {
            name: String::from("exit-code"),
            version: String::from(env!("CARGO_PKG_VERSION")),
            description: String::from("Halts the loop when its step exits with one of `codes`."),
            params_schema: String::from(
                r#"{"$schema": "https://json-schema.org/draft/2020-12/schema",
"type": "object", "required": ["codes"], "additionalProperties": false,
"properties": {"codes": {"type": "array", "items": {"type": "integer"}, "minItems": 1}}}"#,
            ),
        }
    }

    fn check_params(params: String) -> Result<(), String> {
        parse(&params).map(|_| ())
    }

    fn evaluate(ctx: Context) -> Result<Decision, String> {
        let params = parse(&ctx.params)?;
        let Some(code) = ctx.last_run.and_then(|run| run.exit_code) else {
            log(Level::Debug, "no exit code to look at");
            return Ok(Decision::Proceed);
        };
        if params.codes.contains(&code) {
            return Ok(Decision::Halt(format!("the step exited with {code}")));
        }
        Ok(Decision::Proceed)
    }
}

export!(ExitCodeGate);
