//! The `fleetcontroller` binary: parse flags, then the controllers' shared shell
//! ([`verge_controller::binary::main`]: configuration, telemetry, Kubernetes client, run until
//! SIGINT/SIGTERM, drain within the grace period).

use std::process::ExitCode;

use clap::Parser;
use verge_controller::binary::{self, Flags};
use verge_fleetcontroller::{DEFAULT_HEALTH_ADDR, FleetController};

/// Verge fleetcontroller: KubeEdge's NodeGroups and EdgeApplications.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    #[command(flatten)]
    flags: Flags,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    binary::main(
        "fleetcontroller",
        DEFAULT_HEALTH_ADDR,
        args.flags,
        |config, client, shutdown, health| {
            let controller = FleetController::new(config, client);
            binary::report_leadership(health, &controller.leadership());
            controller.run(shutdown)
        },
    )
    .await
}
