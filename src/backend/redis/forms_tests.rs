//! Unit tests of `forms.rs`: which server gets which command.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use super::*;
use crate::backend::KeySet;

fn on(product: ServerProduct, major: u32, minor: u32) -> Commands {
    Commands::of(Some(ServerVersion::new(product, major, minor, 0)))
}

/// docs/operations.md's table, per version. Redis 8.4 is covered here
/// only: no Redis 8.4 server is installable on the test machines.
#[test]
fn each_server_version_has_the_commands_of_its_release() {
    use ServerProduct::{Redis, Valkey};
    let none = Commands::default();
    assert_eq!(Commands::of(None), none);
    assert_eq!(on(Valkey, 8, 0), none);
    assert_eq!(on(Redis, 7, 0), none);
    assert_eq!(on(Redis, 8, 2), none);
    let extend_only = Commands {
        set_if_equal: true,
        ..none
    };
    assert_eq!(on(Valkey, 8, 1), extend_only);
    assert_eq!(
        on(Valkey, 9, 0),
        Commands {
            delete: Some(Delete::DelIfEq),
            ..extend_only
        }
    );
    let all = |delete| Commands {
        delete: Some(delete),
        set_if_equal: true,
        mset_ex: true,
    };
    assert_eq!(on(Valkey, 9, 1), all(Delete::DelIfEq));
    assert_eq!(on(Redis, 8, 4), all(Delete::DelEx));
    assert_eq!(on(Redis, 9, 0), all(Delete::DelEx));
}

#[test]
fn the_setting_chooses_between_command_and_script() {
    let key = KeySet::one("k");
    let release = Op::release(&key, b"t");
    let fenced = Op::acquire_fenced(&key, b"t", Duration::from_secs(1), b"c");
    let redis_84 = on(ServerProduct::Redis, 8, 4);
    let redis_7 = on(ServerProduct::Redis, 7, 0);
    let delex = Form::DeleteIfEqual(Delete::DelEx);
    assert_eq!(form_of(&release, redis_84, Scripts::Auto), Ok(delex));
    assert_eq!(form_of(&release, redis_84, Scripts::Never), Ok(delex));
    let script = Ok(Form::Script(Script::Release));
    assert_eq!(form_of(&release, redis_84, Scripts::Always), script);
    assert_eq!(form_of(&release, redis_7, Scripts::Auto), script);
    let refused = form_of(&release, redis_7, Scripts::Never).unwrap_err();
    assert!(refused.contains("DELEX"), "{refused}");
    assert!(form_of(&fenced, redis_84, Scripts::Never).is_err());
    let plain = Op::acquire(&key, b"t", Duration::from_secs(1));
    assert_eq!(form_of(&plain, redis_7, Scripts::Never), Ok(Form::SetNx));
}
