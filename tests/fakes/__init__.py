"""Faithful fakes of upstream servers, for tests (in-process or on a loopback port)."""
