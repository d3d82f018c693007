"""Test and demo helpers; never imported by the operator."""
