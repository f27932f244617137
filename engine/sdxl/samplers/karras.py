"""Samplers that step along dx/dsigma = (x - denoised) / sigma: euler, euler_a, heun, dpm2, dpm2_a, lms, ipndm.

Each follows k-diffusion's sample_* function of the same name (s_churn 0, s_noise 1),
which diffusers' Euler, Heun, KDPM2 and LMS schedulers match; ipndm follows the
improved PNDM of Zhang & Chen (2023) as zju-pi/diff-sampler and ComfyUI write it:
fixed Adams-Bashforth weights over the last four derivatives.
"""

from __future__ import annotations

import numpy as np

from engine.sdxl.samplers.sampler import MidpointSampler, SamplerState, SigmaSampler, ancestral_step, noise_for

F32 = np.float32


def derivative(x: np.ndarray, denoised: np.ndarray, sigma: float) -> np.ndarray:
    return ((x - denoised) / F32(sigma)).astype(np.float32)


class Euler(SigmaSampler):
    name = "euler"

    def update(self, state: SamplerState, denoised: np.ndarray, rng: np.random.Generator | None) -> None:
        i = state.step
        sigma, sigma_next = float(self.sigmas[i]), float(self.sigmas[i + 1])
        state.finish_step(state.x + derivative(state.x, denoised, sigma) * F32(sigma_next - sigma), denoised)


class EulerAncestral(SigmaSampler):
    name = "euler_a"
    options = {"eta": 1.0}

    def update(self, state: SamplerState, denoised: np.ndarray, rng: np.random.Generator | None) -> None:
        i = state.step
        sigma, sigma_next = float(self.sigmas[i]), float(self.sigmas[i + 1])
        sigma_down, sigma_up = ancestral_step(sigma, sigma_next, self.eta)
        x = state.x + derivative(state.x, denoised, sigma) * F32(sigma_down - sigma)
        if sigma_next > 0 and sigma_up > 0:
            x = x + noise_for(rng, x) * F32(sigma_up)
        state.finish_step(x, denoised)


class Heun(SigmaSampler):
    """Two evaluations a step (the first at the step's start, the second at its end), one on the last step."""

    name = "heun"

    def stages(self, step: int) -> int:
        return 1 if self.sigmas[step + 1] == 0 else 2

    def point(self, state: SamplerState) -> tuple[np.ndarray, float]:
        if state.stage == 0:
            return super().point(state)
        return state.memory["x_end"], float(self.sigmas[state.step + 1])

    def update(self, state: SamplerState, denoised: np.ndarray, rng: np.random.Generator | None) -> None:
        i = state.step
        sigma, sigma_next = float(self.sigmas[i]), float(self.sigmas[i + 1])
        dt = F32(sigma_next - sigma)
        if state.stage == 0:
            d = derivative(state.x, denoised, sigma)
            if self.stages(i) == 1:
                state.finish_step(state.x + d * dt, denoised)
            else:
                state.next_stage(d=d, x_end=(state.x + d * dt).astype(np.float32))
            return
        d_end = derivative(state.memory["x_end"], denoised, sigma_next)
        state.finish_step(state.x + (state.memory["d"] + d_end) / F32(2) * dt, denoised)


class DPM2(MidpointSampler):
    """DPM-Solver-2: Euler to the midpoint, then the whole step with the midpoint's derivative."""

    name = "dpm2"

    def update(self, state: SamplerState, denoised: np.ndarray, rng: np.random.Generator | None) -> None:
        i = state.step
        sigma = float(self.sigmas[i])
        sigma_to, sigma_up = self.target(i)
        if state.stage == 0:
            d = derivative(state.x, denoised, sigma)
            if self.stages(i) == 1:
                state.finish_step(state.x + d * F32(sigma_to - sigma), denoised)
            else:
                state.next_stage(x_mid=(state.x + d * F32(self.midpoint(i) - sigma)).astype(np.float32))
            return
        d_mid = derivative(state.memory["x_mid"], denoised, self.midpoint(i))
        x = state.x + d_mid * F32(sigma_to - sigma)
        if sigma_up > 0:
            x = x + noise_for(rng, x) * F32(sigma_up)
        state.finish_step(x, denoised)


class DPM2Ancestral(DPM2):
    """DPM-Solver-2 down to the ancestral step's sigma_down, then fresh noise (after the second evaluation)."""

    name = "dpm2_a"
    options = {"eta": 1.0}
    ancestral = True


class LMS(SigmaSampler):
    """Linear multistep of order 4: the last four derivatives weighted by integrals of their
    Lagrange polynomials over the step (computed exactly here; k-diffusion integrates numerically)."""

    name = "lms"
    order = 4

    def update(self, state: SamplerState, denoised: np.ndarray, rng: np.random.Generator | None) -> None:
        i = state.step
        sigmas = self.sigmas.astype(np.float64)
        history = [derivative(state.x, denoised, sigmas[i])] + [state.memory[f"d{j}"]
                                                                for j in range(1, min(i + 1, self.order))]
        x = state.x.copy()
        for j, d in enumerate(history):
            x = x + F32(lms_coefficient(sigmas, i, j, len(history))) * d
        older = {f"d{j + 1}": d for j, d in enumerate(history[:self.order - 1])}
        state.finish_step(x, denoised, **older)


def lms_coefficient(sigmas: np.ndarray, i: int, j: int, order: int) -> float:
    """The integral from sigmas[i] to sigmas[i + 1] of the Lagrange basis polynomial of point i - j."""
    others = [sigmas[i - k] for k in range(order) if k != j]
    scale = np.prod([sigmas[i - j] - s for s in others])
    basis = np.polynomial.Polynomial.fromroots(others) if others else np.polynomial.Polynomial([1.0])
    antiderivative = basis.integ()
    return float((antiderivative(sigmas[i + 1]) - antiderivative(sigmas[i])) / scale)


IPNDM_WEIGHTS = ((1.0,), (3 / 2, -1 / 2), (23 / 12, -16 / 12, 5 / 12), (55 / 24, -59 / 24, 37 / 24, -9 / 24))


class IPNDM(SigmaSampler):
    """Improved PNDM: Adams-Bashforth weights of order up to 4 on the derivatives, whatever the step sizes."""

    name = "ipndm"

    def update(self, state: SamplerState, denoised: np.ndarray, rng: np.random.Generator | None) -> None:
        i = state.step
        sigma, sigma_next = float(self.sigmas[i]), float(self.sigmas[i + 1])
        weights = IPNDM_WEIGHTS[min(i, len(IPNDM_WEIGHTS) - 1)]
        history = [derivative(state.x, denoised, sigma)] + [state.memory[f"d{j}"] for j in range(1, len(weights))]
        slope = sum(F32(w) * d for w, d in zip(weights, history))
        older = {f"d{j + 1}": d for j, d in enumerate(history[:len(IPNDM_WEIGHTS) - 1])}
        state.finish_step(state.x + F32(sigma_next - sigma) * slope, denoised, **older)
