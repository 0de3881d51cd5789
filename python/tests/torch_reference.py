"""A float64 reference of blocklstm.torch's LSTM and LSTMCell, written from the equations."""
import torch


def reference_module(m, x, h0, c0, suffix="_l0"):
    """The module's function in float64 autograd, written from the equations: nn.LSTM's gates
    (i, f, g, o) with TF's options: wci and wcf see the previous cell state and wco the new clipped
    one, forget_bias is added to the forget gate's pre-activation, and the cell state is clipped to
    +-cell_clip with TF's gradient, straight through the clip; with weight_hr (proj_size), h is
    projected before the next step and the output see it. One layer and direction: the
    parameters named with `suffix` ("_l0" for LSTM's first layer, "" for LSTMCell's). Returns
    (output, h_n, c_n), the float64 leaves (x, h0, c0 and every parameter by name) and whether the
    clip acted."""
    leaves = {n: t.detach().double().requires_grad_() for n, t in m.named_parameters()}
    leaves.update(x=x.detach().double().requires_grad_(), h0=h0.detach().double().requires_grad_(),
                  c0=c0.detach().double().requires_grad_())
    p = leaves
    zero = torch.zeros(m.hidden_size, dtype=torch.float64)
    wci, wcf, wco = (p.get(n + suffix, zero) for n in ("weight_ci", "weight_cf", "weight_co"))
    bias = p.get("bias_ih" + suffix, 0) + p.get("bias_hh" + suffix, 0)
    h, c, hs, clipped = p["h0"][0], p["c0"][0], [], False
    for t in range(x.shape[0]):
        z = p["x"][t] @ p["weight_ih" + suffix].T + h @ p["weight_hh" + suffix].T + bias
        zi, zf, zg, zo = z.chunk(4, 1)
        i = torch.sigmoid(zi + wci * c)
        f = torch.sigmoid(zf + m.forget_bias + wcf * c)
        c = f * c + i * torch.tanh(zg)
        if m.cell_clip:
            clipped |= bool((c.abs() > m.cell_clip).any())
            c = c + (c.clamp(-m.cell_clip, m.cell_clip) - c).detach()  # TF's gradient: straight through
        h = torch.sigmoid(zo + wco * c) * torch.tanh(c)
        if "weight_hr" + suffix in p:  # LSTMP: the projected h is what the next step and the output see
            h = h @ p["weight_hr" + suffix].T
        hs.append(h)
    return torch.stack(hs), h[None], c[None], leaves, clipped
