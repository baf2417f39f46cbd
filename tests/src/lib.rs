//! End-to-end test support for Verge (see tests/tests/).
