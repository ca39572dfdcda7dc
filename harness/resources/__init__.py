"""What a launch draws from the machine: port and GPU leases, the tier, the model files."""
