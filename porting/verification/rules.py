"""Each source framework's own rules, written again in numpy to check ours against.

``timm_vit_variants.geometry`` and ``posemb`` compute with torch; these are independent transcriptions
of what the source frameworks do, used only by verification (and tested against fixtures that
Google's own code produced, ``tests/data/reference``):

  * ``bigvision_posemb_sincos_2d``: big_vision's ``posemb_sincos_2d``;
  * ``zoom_linear``: ``scipy.ndimage.zoom(order=1)``, i.e. big_vision's ``vit.resample_posemb`` and
    vit_jax's ``checkpoint.interpolate_posembed`` (bilinear through the corner samples);
  * ``jax_linear``: ``jax.image.resize(method='linear')``, FlexiViT's run-time table resize
    (half-pixel centres; a widened, renormalised triangle kernel when shrinking, i.e. antialiased);
  * ``flexi_pi_resize``: FlexiViT's ``resample_patchemb``: the pseudo-inverse of the matrix that
    resizes each basis patch with TF's half-pixel bilinear (no antialias), applied per channel pair.
"""
import numpy as np

from timm_vit_variants.errors import ViTVariantsError

__all__ = ['bigvision_posemb_sincos_2d', 'zoom_linear', 'jax_linear', 'tf_bilinear_matrix', 'flexi_pi_resize',
           'resize_grid_table']


def bigvision_posemb_sincos_2d(h: int, w: int, width: int, temperature: float = 10_000.) -> np.ndarray:
    """big_vision ``posemb_sincos_2d`` in numpy, shape (1, h*w, width), written from big_vision's formula."""
    if width % 4:
        raise ViTVariantsError(f'sin-cos position embedding needs a width divisible by 4, got {width}')
    y, x = np.mgrid[:h, :w]
    quarter = width // 4
    omega = np.arange(quarter) / (quarter - 1)
    omega = 1.0 / (temperature ** omega)
    y = np.einsum('m,d->md', y.flatten(), omega)
    x = np.einsum('m,d->md', x.flatten(), omega)
    table = np.concatenate([np.sin(x), np.cos(x), np.sin(y), np.cos(y)], axis=1)
    return np.asarray(table, np.float32)[None]


def _linear_matrix(positions: np.ndarray, n_in: int) -> np.ndarray:
    """(len(positions), n_in) weights of linear interpolation at input coordinates ``positions`` (in range)."""
    m = np.zeros((len(positions), n_in), np.float64)
    for i, x in enumerate(positions):
        j = min(int(np.floor(x)), n_in - 1)
        f = x - j
        m[i, j] += 1 - f
        if f > 0:
            m[i, j + 1] += f
    return m


def _corner_matrix(n_in: int, n_out: int) -> np.ndarray:
    """Linear interpolation through the end samples (scipy zoom, grid_mode=False)."""
    positions = np.zeros(1) if n_out == 1 else np.arange(n_out) * (n_in - 1) / (n_out - 1)
    return _linear_matrix(positions, n_in)


def _triangle_matrix(n_in: int, n_out: int, antialias: bool) -> np.ndarray:
    """(n_out, n_in) weights of jax.image.resize 'linear' (scale_and_translate with a triangle kernel)."""
    scale = n_out / n_in
    kernel_scale = min(scale, 1.0) if antialias else 1.0
    centres = (np.arange(n_out) + 0.5) / scale - 0.5
    weights = 1 - np.abs((centres[:, None] - np.arange(n_in)[None, :]) * kernel_scale)
    weights = np.maximum(weights, 0)
    total = weights.sum(axis=1, keepdims=True)
    return np.where(total > 0, weights / np.where(total > 0, total, 1), 0)


def tf_bilinear_matrix(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in) weights of ``tf.image.resize(method='bilinear')`` (half-pixel centres, clamped, no antialias)."""
    positions = np.clip((np.arange(n_out) + 0.5) * n_in / n_out - 0.5, 0, n_in - 1)
    return _linear_matrix(positions, n_in)


def _resize(grid: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Apply separable (out, in) matrices to the first two axes of an (H, W, D) grid, in float64."""
    return np.einsum('ih,jw,hwd->ijd', rows, cols, grid.astype(np.float64))


def zoom_linear(grid: np.ndarray, new_h: int, new_w: int) -> np.ndarray:
    """``scipy.ndimage.zoom(grid, (new_h / h, new_w / w, 1), order=1)`` for an (H, W, D) grid."""
    h, w = grid.shape[:2]
    return _resize(grid, _corner_matrix(h, new_h), _corner_matrix(w, new_w)).astype(np.float32)


def jax_linear(grid: np.ndarray, new_h: int, new_w: int, antialias: bool = True) -> np.ndarray:
    """``jax.image.resize(grid, (new_h, new_w, D), 'linear', antialias=antialias)`` for an (H, W, D) grid."""
    h, w = grid.shape[:2]
    return _resize(grid, _triangle_matrix(h, new_h, antialias), _triangle_matrix(w, new_w, antialias)).astype(
        np.float32)


def resize_grid_table(table: np.ndarray, old_grid, new_grid, prefix: int, rule: str) -> np.ndarray:
    """A (1, prefix + H*W, D) learned table resized with a framework's rule; prefix rows kept as they are."""
    resize = {'bigvision': zoom_linear, 'flexi': jax_linear}[rule]
    dim = table.shape[-1]
    grid = table[0, prefix:].reshape(old_grid[0], old_grid[1], dim)
    out = resize(grid, new_grid[0], new_grid[1]).reshape(1, new_grid[0] * new_grid[1], dim)
    return np.concatenate([table[:, :prefix].astype(np.float32), out], axis=1)


def flexi_pi_resize(kernel_oihw: np.ndarray, new_h: int, new_w: int) -> np.ndarray:
    """FlexiViT's pseudo-inverse resize of an (O, I, P, P) kernel to (O, I, new_h, new_w), in float32 as big_vision."""
    out_c, in_c, old_h, old_w = kernel_oihw.shape
    if (old_h, old_w) == (new_h, new_w):
        return kernel_oihw.astype(np.float32)
    rows, cols = tf_bilinear_matrix(old_h, new_h), tf_bilinear_matrix(old_w, new_w)
    # Column k of the resize matrix is basis patch k resized; vec() is row-major over (h, w).
    resize = np.kron(rows, cols).astype(np.float32)  # (new_h * new_w, old_h * old_w)
    inverse = np.linalg.pinv(resize.T)  # (new_h * new_w, old_h * old_w)
    flat = kernel_oihw.reshape(out_c * in_c, old_h * old_w).astype(np.float32)
    return (flat @ inverse.T).reshape(out_c, in_c, new_h, new_w).astype(np.float32)
