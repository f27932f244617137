// OnnxStream's side of bench/onnxstream.py: one model configured as OnnxStream's sd.cpp (commit 9f54639)
// configures its SDXL models, run on inputs from raw float32 files, its output written the same way.
//
//   onnxstream_driver CONFIG MODEL_DIR OUTPUT RESULT_JSON REPEATS NAME=FILE:D0,D1,... [...]
//
// CONFIG (the settings are sd.cpp's; its lines are named next to each):
//   unet-rpi-lowmem  diffusion_solver with --rpi-lowmem: DiskNoCache weights, fp32 arithmetic, attention
//                    fused and sliced 16 ways, intermediates stored as fp16, the 9 skip tensors as uint8
//   unet-default     diffusion_solver on a PC with AVX2 (detect_fp16_support() is true, so no --rpi):
//                    DiskPrefetch weights, fp16 arithmetic, attention fused and sliced 2 ways
//   vae-tiled        sdxl_decoder, tiled: the 32x32-latent decoder over tiles with stride 24, blended into
//                    the picture as sd.cpp does (the input latent is already divided by the scaling factor)
// The model is evaluated REPEATS times in this one process (inputs pushed again each time), as sd.cpp does
// for every step. RESULT_JSON gets the seconds of each evaluation, the per-op-kind milliseconds of the
// last one (OnnxStream's m_ops_times_printf, parsed from its stdout by the caller) and the peak RSS.

#include "onnxstream.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

using namespace onnxstream;

struct Input
{
    std::string name;   // OnnxStream's encoded tensor name (get_final_name in its onnx2txt notebook)
    std::string file;
    std::vector<size_t> shape;
};

static size_t count(const std::vector<size_t>& shape)
{
    size_t n = 1;
    for (auto d : shape)
        n *= d;
    return n;
}

static tensor_vector<float> read_floats(const std::string& file, size_t n)
{
    std::ifstream f(file, std::ios::binary);
    if (!f)
        throw std::invalid_argument("cannot open input file " + file);
    tensor_vector<float> v(n);
    f.read(reinterpret_cast<char*>(v.data()), n * sizeof(float));
    if (f.gcount() != static_cast<std::streamsize>(n * sizeof(float)))
        throw std::invalid_argument("input file " + file + " has fewer than " + std::to_string(n) + " float32 values");
    return v;
}

static Input parse_input(const std::string& arg)
{
    auto eq = arg.find('='), colon = arg.rfind(':');
    if (eq == std::string::npos || colon == std::string::npos || colon < eq)
        throw std::invalid_argument("input '" + arg + "' is not NAME=FILE:D0,D1,...");
    Input in{arg.substr(0, eq), arg.substr(eq + 1, colon - eq - 1), {}};
    std::stringstream dims(arg.substr(colon + 1));
    for (std::string d; std::getline(dims, d, ',');)
        in.shape.push_back(std::stoul(d));
    return in;
}

static size_t peak_rss_bytes()
{
    std::ifstream f("/proc/self/status");
    for (std::string line; std::getline(f, line);)
        if (line.rfind("VmHWM:", 0) == 0)
            return std::stoul(line.substr(6)) * 1024;
    return 0;
}

static void configure(Model& model, const std::string& config)
{
    if (config == "unet-rpi-lowmem" || config == "unet-default")
    {
        bool lowmem = config == "unet-rpi-lowmem";
        if (lowmem)
            model.set_weights_provider(DiskNoCacheWeightsProvider());
        model.m_use_fp16_arithmetic = !lowmem;
        model.m_fuse_ops_in_attention = true;
        if (lowmem)
        {
            model.m_attention_fused_ops_parts = 16;
            model.m_force_fp16_storage = true;
            model.m_force_uint8_storage_set = {
                "_2F_unet_2F_conv_5F_in_2F_Conv_5F_output_5F_0",
                "_2F_unet_2F_down_5F_blocks_2E_0_2F_resnets_2E_0_2F_Add_5F_1_5F_output_5F_0",
                "_2F_unet_2F_down_5F_blocks_2E_1_2F_attentions_2E_0_2F_Add_5F_output_5F_0",
                "_2F_unet_2F_down_5F_blocks_2E_0_2F_resnets_2E_1_2F_Add_5F_1_5F_output_5F_0",
                "_2F_unet_2F_down_5F_blocks_2E_0_2F_downsamplers_2E_0_2F_conv_2F_Conv_5F_output_5F_0",
                "_2F_unet_2F_down_5F_blocks_2E_1_2F_attentions_2E_1_2F_Add_5F_output_5F_0",
                "_2F_unet_2F_down_5F_blocks_2E_1_2F_downsamplers_2E_0_2F_conv_2F_Conv_5F_output_5F_0",
                "_2F_unet_2F_down_5F_blocks_2E_2_2F_attentions_2E_0_2F_Add_5F_output_5F_0",
                "_2F_unet_2F_up_5F_blocks_2E_0_2F_Concat_5F_output_5F_0"};
        }
        model.m_support_dynamic_shapes = true;
    }
    else if (config == "vae-tiled")
        model.m_support_dynamic_shapes = true;
    else
        throw std::invalid_argument("unknown CONFIG '" + config + "' (unet-rpi-lowmem, unet-default, vae-tiled)");
}

static tensor_vector<float> run_once(Model& model, const std::vector<Input>& inputs)
{
    for (auto& in : inputs)
    {
        Tensor t;
        t.m_name = in.name;
        t.m_shape = in.shape;
        t.set_vector(read_floats(in.file, count(in.shape)));
        model.push_tensor(std::move(t));
    }
    model.run();
    auto out = std::move(model.m_data[0].get_vector<float>());
    model.m_data.clear();
    return out;
}

// sd.cpp's sdxl_decoder, tiled: 32x32-latent tiles at stride 24 (the last row and column moved back to the
// edge), each blended in raster order with a linear ramp over 64 pixels on its top and left edges.
static tensor_vector<float> decode_tiled(Model& model, const Input& latent)
{
    if (latent.shape.size() != 4 || latent.shape[0] != 1 || latent.shape[1] != 4 || latent.shape[2] < 32 ||
        latent.shape[3] < 32)
        throw std::invalid_argument("vae-tiled needs a 1x4xHxW latent with H, W >= 32");
    const int lh = latent.shape[2], lw = latent.shape[3], h = lh * 8, w = lw * 8;
    tensor_vector<float> z = read_floats(latent.file, count(latent.shape));
    tensor_vector<float> res(3 * h * w, 0.0f);
    for (int y = 0; y < lh; y += 24)
    {
        if (y + 32 > lh)
            y = lh - 32;
        for (int x = 0; x < lw; x += 24)
        {
            if (x + 32 > lw)
                x = lw - 32;
            tensor_vector<float> v(4 * 32 * 32);
            float* dst = v.data();
            for (int c = 0; c < 4; c++)
                for (int yy = 0; yy < 32; yy++)
                    for (int xx = 0; xx < 32; xx++)
                        *dst++ = z[(c * lh + y + yy) * lw + x + xx];
            Tensor t;
            t.m_name = "latent_5F_sample";
            t.m_shape = {1, 4, 32, 32};
            t.set_vector(std::move(v));
            model.push_tensor(std::move(t));
            model.run();
            const float* src = model.m_data[0].get_vector<float>().data();
            const int dx = x * 8, dy = y * 8;
            for (int c = 0; c < 3; c++)
                for (int yy = 0; yy < 256; yy++)
                    for (int xx = 0; xx < 256; xx++)
                    {
                        float f = 1;
                        if (dy && yy < 64)
                            f = (float)yy / 64;
                        if (dx && xx < 64)
                            f *= (float)xx / 64;
                        float& d = res[(c * h + dy + yy) * w + dx + xx];
                        d = *src++ * f + d * (1 - f);
                    }
            model.m_data.clear();
            if (x == lw - 32)
                break;
        }
        if (y == lh - 32)
            break;
    }
    return res;
}

int main(int argc, char** argv)
{
    if (argc < 7)
    {
        std::fprintf(stderr, "usage: %s CONFIG MODEL_DIR OUTPUT RESULT_JSON REPEATS NAME=FILE:D0,D1,... [...]\n", argv[0]);
        return 2;
    }
    try
    {
        const std::string config = argv[1], model_dir = argv[2], output = argv[3], result = argv[4];
        const int repeats = std::stoi(argv[5]);
        std::vector<Input> inputs;
        for (int i = 6; i < argc; i++)
            inputs.push_back(parse_input(argv[i]));

        Model model;
        configure(model, config);
        model.m_ops_times_printf = true;
        auto t0 = std::chrono::steady_clock::now();
        model.read_file((model_dir + "/model.txt").c_str());
        double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

        std::vector<double> eval_s;
        tensor_vector<float> out;
        for (int r = 0; r < repeats; r++)
        {
            auto t1 = std::chrono::steady_clock::now();
            out = config == "vae-tiled" ? decode_tiled(model, inputs.at(0)) : run_once(model, inputs);
            eval_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count());
            std::printf("\n[eval %d] %.3f s\n", r + 1, eval_s.back());
            std::fflush(stdout);
        }

        std::ofstream f(output, std::ios::binary);
        f.write(reinterpret_cast<const char*>(out.data()), out.size() * sizeof(float));
        if (!f)
            throw std::runtime_error("cannot write " + output);

        std::ofstream j(result);
        j << "{\"load_s\": " << load_s << ", \"eval_s\": [";
        for (size_t i = 0; i < eval_s.size(); i++)
            j << (i ? ", " : "") << eval_s[i];
        j << "], \"out_values\": " << out.size() << ", \"vmhwm_bytes\": " << peak_rss_bytes() << "}\n";
    }
    catch (const std::exception& e)
    {
        std::fprintf(stderr, "=== ERROR === %s\n", e.what());
        return 1;
    }
    return 0;
}
