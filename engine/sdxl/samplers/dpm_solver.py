"""Exponential-integrator samplers in log sigma: dpmpp_2m, dpmpp_2m_sde, dpmpp_3m_sde, dpmpp_2s_a and unipc.

The DPM++ ones follow k-diffusion's sample_dpmpp_* (which diffusers' DPMSolverMultistep
matches for 2M and 2M SDE), unipc diffusers' UniPCMultistepScheduler (B(h) = e^h - 1,
order 2, predicting x0, lower order on the last step) rewritten in sigma space. The
multistep ones (not dpmpp_2s_a) give the UNet whole timesteps, as diffusers does.
With `h = log(sigma / sigma_next)`: a step to sigma 0 lands on the denoised estimate.
"""

from __future__ import annotations

import math

import numpy as np

from engine.sdxl.samplers.sampler import MidpointSampler, SamplerState, SigmaSampler, noise_for

F32 = np.float32


def step_size(sigma: float, sigma_next: float) -> float:
    """h: how far one step goes in log sigma."""
    return math.log(sigma / sigma_next)


class DPMPP2MSDE(SigmaSampler):
    """DPM-Solver++(2M) SDE, midpoint: the previous step's denoised estimate makes the step second
    order, and eta times h of fresh noise goes in each step."""

    name = "dpmpp_2m_sde"
    whole_timesteps = True
    options = {"eta": 1.0}

    def update(self, state: SamplerState, denoised: np.ndarray, rng: np.random.Generator | None) -> None:
        if self.landed(state, denoised, previous=denoised):
            return
        i = state.step
        sigma, sigma_next = float(self.sigmas[i]), float(self.sigmas[i + 1])
        h = step_size(sigma, sigma_next)
        eta_h = (self.eta or 0.0) * h
        keep = -math.expm1(-h - eta_h)
        x = F32(sigma_next / sigma * math.exp(-eta_h)) * state.x + F32(keep) * denoised
        if i > 0:
            r = step_size(float(self.sigmas[i - 1]), sigma) / h
            x = x + F32(0.5 * keep / r) * (denoised - state.memory["previous"])
        if self.eta:
            x = x + noise_for(rng, x) * F32(sigma_next * math.sqrt(-math.expm1(-2 * eta_h)))
        state.finish_step(x, denoised, previous=denoised)


class DPMPP2M(DPMPP2MSDE):
    """DPM-Solver++(2M): the SDE form without noise is the same update."""

    name = "dpmpp_2m"
    options = {}


class DPMPP3MSDE(SigmaSampler):
    """DPM-Solver++(3M) SDE: the last two denoised estimates make the step third order."""

    name = "dpmpp_3m_sde"
    whole_timesteps = True
    options = {"eta": 1.0}

    def update(self, state: SamplerState, denoised: np.ndarray, rng: np.random.Generator | None) -> None:
        i = state.step
        history = {"previous": denoised}
        if i > 0:
            history["before_previous"] = state.memory["previous"]
        if self.landed(state, denoised, **history):
            return
        sigma, sigma_next = float(self.sigmas[i]), float(self.sigmas[i + 1])
        h = step_size(sigma, sigma_next)
        h_eta = h * (self.eta + 1)
        x = F32(math.exp(-h_eta)) * state.x + F32(-math.expm1(-h_eta)) * denoised
        phi_2 = math.expm1(-h_eta) / h_eta + 1
        if i >= 2:
            r0 = step_size(float(self.sigmas[i - 1]), sigma) / h
            r1 = step_size(float(self.sigmas[i - 2]), float(self.sigmas[i - 1])) / h
            d1_0 = (denoised - state.memory["previous"]) / F32(r0)
            d1_1 = (state.memory["previous"] - state.memory["before_previous"]) / F32(r1)
            d1 = d1_0 + (d1_0 - d1_1) * F32(r0 / (r0 + r1))
            d2 = (d1_0 - d1_1) / F32(r0 + r1)
            phi_3 = phi_2 / h_eta - 0.5
            x = x + F32(phi_2) * d1 - F32(phi_3) * d2
        elif i == 1:
            r = step_size(float(self.sigmas[i - 1]), sigma) / h
            x = x + F32(phi_2) * ((denoised - state.memory["previous"]) / F32(r))
        if self.eta:
            x = x + noise_for(rng, x) * F32(sigma_next * math.sqrt(-math.expm1(-2 * h * self.eta)))
        state.finish_step(x, denoised, **history)


class DPMPP2SAncestral(MidpointSampler):
    """DPM-Solver++(2S) down to the ancestral sigma_down, then fresh noise after the second evaluation."""

    name = "dpmpp_2s_a"
    options = {"eta": 1.0}
    ancestral = True

    def update(self, state: SamplerState, denoised: np.ndarray, rng: np.random.Generator | None) -> None:
        i = state.step
        sigma, sigma_next = float(self.sigmas[i]), float(self.sigmas[i + 1])
        sigma_down, sigma_up = self.target(i)
        if state.stage == 0 and sigma_down == 0:
            x = denoised
        elif state.stage == 0:
            h = step_size(sigma, sigma_down)
            x_mid = F32(self.midpoint(i) / sigma) * state.x - F32(math.expm1(-h / 2)) * denoised
            state.next_stage(x_mid=x_mid.astype(np.float32))
            return
        else:
            h = step_size(sigma, sigma_down)
            x = F32(sigma_down / sigma) * state.x - F32(math.expm1(-h)) * denoised
        if sigma_next > 0 and sigma_up > 0:
            x = x + noise_for(rng, x) * F32(sigma_up)
        state.finish_step(x, denoised)


class UniPC(SigmaSampler):
    """UniPC (bh2, order 2): each step first corrects the latents the last step predicted with
    this step's denoised estimate (UniC), then predicts the next ones (UniP)."""

    name = "unipc"
    whole_timesteps = True
    order = 2

    def step_order(self, step: int) -> int:
        """The predictor's order at `step`: lower while warming up and on the last step."""
        return min(self.order, self.steps - step, step + 1)

    def update(self, state: SamplerState, denoised: np.ndarray, rng: np.random.Generator | None) -> None:
        i = state.step
        sigmas = self.sigmas.astype(np.float64)
        x = state.x
        if i > 0:
            x = self.corrected(state, denoised, sigmas)
        history = {"previous": denoised, "last_sample": x.astype(np.float32)}
        if i > 0:
            history["before_previous"] = state.memory["previous"]
        if self.landed(state, denoised, **history):
            return
        h = step_size(sigmas[i], sigmas[i + 1])
        h_phi_1 = math.expm1(-h)
        x_next = F32(sigmas[i + 1] / sigmas[i]) * x - F32(h_phi_1) * denoised
        if self.step_order(i) == 2:
            rk = step_size(sigmas[i - 1], sigmas[i]) / -h
            x_next = x_next - F32(h_phi_1 * 0.5 / rk) * (state.memory["previous"] - denoised)
        state.finish_step(x_next, denoised, **history)

    def corrected(self, state: SamplerState, denoised: np.ndarray, sigmas: np.ndarray) -> np.ndarray:
        """UniC: the last step's prediction corrected with this step's estimate."""
        i = state.step
        order = self.step_order(i - 1)
        previous = state.memory["previous"]
        h = step_size(sigmas[i - 1], sigmas[i])
        hh = -h
        h_phi_1 = math.expm1(hh)
        rks = [1.0]
        differences = []
        if order == 2:
            rk = step_size(sigmas[i - 2], sigmas[i - 1]) / hh
            rks = [rk, 1.0]
            differences = [(state.memory["before_previous"] - previous) / F32(rk)]
        b, h_phi_k, factorial = [], h_phi_1 / hh - 1, 1
        for k in range(1, order + 1):
            b.append(h_phi_k * factorial / h_phi_1)
            factorial *= k + 1
            h_phi_k = h_phi_k / hh - 1 / factorial
        if order == 1:
            rhos = [0.5]
        else:
            rhos = np.linalg.solve(np.array([np.power(rks, k) for k in range(order)]), np.array(b)).tolist()
        x = F32(sigmas[i] / sigmas[i - 1]) * state.memory["last_sample"] - F32(h_phi_1) * previous
        correction = F32(rhos[-1]) * (denoised - previous)
        for rho, difference in zip(rhos[:-1], differences):
            correction = correction + F32(rho) * difference
        return (x - F32(h_phi_1) * correction).astype(np.float32)
