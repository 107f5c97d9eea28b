/* Stand-in for tdm_chat_render (include/tandem/tokenizer.h) while its implementation
 * (src/llm/chat_template*.c, another branch) is absent: CMake compiles this file only then. */
#include "core/status.h"
#include "tandem/tokenizer.h"

tdm_status *tdm_chat_render(const char *template_text, const tdm_chat_message *messages,
                            size_t n_messages, bool add_generation_prompt, const char *bos_token,
                            const char *eos_token, char **out) {
    (void)template_text, (void)messages, (void)n_messages, (void)add_generation_prompt;
    (void)bos_token, (void)eos_token, (void)out;
    return TDM_ERR(TDM_ERR_UNSUPPORTED, "this build of tandem has no chat templates");
}
