"""The identity layer: who a probe is. The gate (τ, policy, fusion), enrolment and step-up, attempt limits,
what a requester may learn (disclosure), the encoders, τ calibration and the sample faces."""
